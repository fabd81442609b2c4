"""Fleet uniformity: node facts carry GPU VBIOS (from the health checks' one nvidia-smi query) and HCA
firmware (sysfs); the fleet report flags the hosts whose driver, CUDA, kernel, VBIOS or HCA firmware
differ from the majority. Fleets are synthetic copies of the real 2x H200 node report."""
from __future__ import annotations

import copy
import json
from pathlib import Path

from tests.helpers.fake_node import FakeTree
from tests.helpers.replay import ReplayRunner
from verify.facts import health_smi
from verify.facts.firmware import firmware_facts
from verify.fleet.model import load_fleet_dir
from verify.fleet.summary import build_summary
from verify.fleet.synthetic import derive_hosts, write_fleet
from verify.result import Status
from verify.runner import CommandOutput
from verify.stats.uniformity import fleet_versions

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
IDLE = (FIXTURES / "node" / "health" / "h200_query-gpu_idle_590.48.01.csv").read_text()  # real, public
BANNER = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build\n"
# /sys/class/infiniband/<dev>/{fw_ver,hca_type,board_id} as mlx5 prints them (Documentation/ABI/stable/
# sysfs-class-infiniband); no node of ours has an HCA to capture.
HCA = {"fw_ver": "28.39.1002", "hca_type": "MT4129", "board_id": "MT_0000000838"}


def test_facts_read_vbios_from_the_health_query_and_hca_firmware_from_sysfs(tmp_path):
    tree = FakeTree(tmp_path).write("/proc/driver/nvidia/version", BANNER)
    for name, value in HCA.items():
        tree.write(f"/sys/class/infiniband/mlx5_0/{name}", value + "\n")
    runner = ReplayRunner({tuple(health_smi.argv()): CommandOutput(health_smi.argv(), 0, IDLE, "", 0.1)})
    node = tree.node(runner=runner, live=True)
    facts = firmware_facts(node)
    assert facts["gpus"] == [{"index": 0, "bus_id": "00000000:83:00.0", "name": "NVIDIA H200",
                              "vbios": "96.00.A5.00.03"}]
    assert facts["hcas"] == [dict(HCA, device="mlx5_0")]
    health_smi.query(node)  # the health checks read the same memoised answer: one nvidia-smi call in all
    assert runner.calls == [health_smi.argv()]


def test_without_a_driver_no_command_runs_and_the_reason_is_kept(tmp_path):
    runner = ReplayRunner()
    facts = firmware_facts(FakeTree(tmp_path).node(runner=runner, live=True))
    assert facts["gpus"] == [] and "no NVIDIA driver" in facts["gpus_unavailable"] and runner.calls == []


def firmware(vbios=("96.00.A5.00.03", "96.00.A5.00.03"), hcas=(("MT4129", "28.39.1002"),)) -> dict:
    return {"gpus": [{"index": i, "bus_id": f"00000000:0{6 + i}:00.0", "name": "NVIDIA H200", "vbios": v}
                     for i, v in enumerate(vbios)],
            "hcas": [{"device": f"mlx5_{i}", "hca_type": t, "board_id": None, "fw_ver": f}
                     for i, (t, f) in enumerate(hcas)]}


def test_firmware_is_compared_per_model_as_the_set_of_versions_a_host_runs():
    facts = {"kernel": "6.18.44", "firmware": firmware(vbios=("B", "A", "A"),
                                                       hcas=(("MT4129", "28.39.1002"), ("MT4125", "22.41.1000")))}
    assert fleet_versions(facts) == {"kernel": "6.18.44", "firmware.vbios[NVIDIA H200]": "A,B",
                                     "firmware.hca_fw[MT4129]": "28.39.1002", "firmware.hca_fw[MT4125]": "22.41.1000"}


def test_the_fleet_report_flags_each_host_off_the_majority_and_only_those(tmp_path):
    base = json.loads((FIXTURES / "node" / "gpu_machine_report.json").read_text())  # real 2x H200 report
    measurement = json.loads((FIXTURES / "fleet" / "crossnode_allreduce_gloo_2node.json").read_text())[0]
    hosts = derive_hosts(base, measurement, 7)
    for host in hosts:
        host["facts"]["firmware"] = firmware()
    hosts[1]["facts"]["firmware"] = firmware(vbios=("96.00.A5.00.03", "96.00.74.00.1C"))  # one GPU reflashed
    hosts[2]["facts"]["firmware"] = firmware(hcas=(("MT4129", "28.36.1010"),))  # HCA firmware behind
    hosts[3]["facts"]["kernel"] = "6.8.0-45-generic"
    hosts[4]["facts"]["gpus"]["cuda_driver_version"] = "12.8"
    hosts[5]["facts"]["firmware"] = firmware(vbios=("96.00.A5.00.03",))  # a GPU missing: presence says so
    write_fleet(tmp_path, hosts)
    nodes, errors = load_fleet_dir(str(tmp_path))
    assert errors == []
    summary = build_summary(nodes, errors)
    found = sorted((d.host, d.key, d.value, d.majority) for d in summary.drift)
    assert found == [
        ("gpu-00001", "firmware.vbios[NVIDIA H200]", "96.00.74.00.1C,96.00.A5.00.03", "96.00.A5.00.03"),
        ("gpu-00002", "firmware.hca_fw[MT4129]", "28.36.1010", "28.39.1002"),
        ("gpu-00003", "kernel", "6.8.0-45-generic", base["facts"]["kernel"]),
        ("gpu-00004", "gpus.cuda_driver_version", "12.8", "13.0"),
    ]
    rows = {row.host: row for row in summary.rows}
    flagged = next(r for r in rows["gpu-00002"].problems if r.check_id == "fleet.version.firmware.hca_fw[MT4129]")
    assert flagged.status is Status.WARN and "6 hosts have '28.39.1002'" in flagged.reason
    assert not any(r.check_id.startswith("fleet.version") for r in rows["gpu-00005"].problems)


def test_a_report_without_firmware_facts_still_gives_the_other_versions():
    base = json.loads((FIXTURES / "node" / "gpu_machine_report.json").read_text())
    facts = copy.deepcopy(base["facts"])
    versions = fleet_versions(facts)
    assert versions["gpus.driver_version"] == "580.159.04" and versions["kernel"] == facts["kernel"]
    assert not any(key.startswith("firmware.") for key in versions)
