"""The 2-node pair test on one rail (verify/fleet/nccl_pair.py) and the report's pair matrix."""
from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from verify.fleet import multinode
from verify.fleet.nccl_pair import (
    RATE_FLOOR_FRACTION,
    Rail,
    build_parser,
    find_rail,
    gpu_on_numa,
    outcome_of,
    rail_env,
    rail_floor,
    rail_peak,
)
from verify.report.pair_matrix import heat_map_svg, pairs_section

REPO = Path(__file__).resolve().parent.parent.parent
# A real 2-node gloo all-reduce (molecule fleet scenario, see tests/fixtures/fleet/README.md).
CAPTURED = json.loads((REPO / "tests/fixtures/fleet/crossnode_allreduce_gloo_2node.json").read_text())[0]
ROWS = [{k: p[k] for k in ("size_bytes", "count", "dtype", "redop", "time_us", "algbw_gbps", "busbw_gbps", "wrong")}
        for p in CAPTURED["details"]["curve"]]


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def sysfs(tmp_path: Path) -> Path:
    """Two HCAs on NUMA 0 and 1, their netdevs, and two GPUs (one per NUMA node)."""
    for hca, netdev, numa in (("mlx5_0", "ibp1", 0), ("mlx5_1", "ibp2", 1)):
        base = tmp_path / "sys/class/infiniband" / hca
        write(base / "ports/1/rate", "400 Gb/sec (4X NDR)\n")
        write(base / "device/numa_node", f"{numa}\n")
        write(base / f"device/net/{netdev}/ifindex", "1\n")
    write(tmp_path / "sys/class/net/eth1/speed", "25000\n")
    write(tmp_path / "sys/class/net/eth1/device/numa_node", "-1\n")
    for address, numa in (("0000:19:00.0", 0), ("0000:9b:00.0", 1)):
        write(tmp_path / "sys/bus/pci/drivers/nvidia" / address / "numa_node", f"{numa}\n")
    return tmp_path


def test_a_rail_pins_nccl_to_its_hca_and_the_gpu_on_its_numa_node(tmp_path):
    root = str(sysfs(tmp_path))
    rail = find_rail(root, "mlx5_1")
    assert rail == Rail("mlx5_1", "mlx5_1", "ibp2", 1, 400.0, None)
    gpu = gpu_on_numa(root, rail.numa)
    env = rail_env(rail, "nccl", gpu)
    assert env == {"NCCL_IB_HCA": "=mlx5_1", "NCCL_SOCKET_IFNAME": "=ibp2", "GLOO_SOCKET_IFNAME": "ibp2",
                   "CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "1"}


def test_a_nic_rail_pins_gloo_and_nccl_sockets_and_a_missing_rail_is_none(tmp_path):
    root = str(sysfs(tmp_path))
    rail = find_rail(root, "eth1")
    assert rail == Rail("eth1", None, "eth1", None, None, 25000)
    assert rail_env(rail, "gloo", None) == {"GLOO_SOCKET_IFNAME": "eth1", "NCCL_SOCKET_IFNAME": "=eth1"}
    assert rail_env(rail, "nccl", 0)["NCCL_IB_DISABLE"] == "1"
    assert find_rail(root, "mlx5_7") is None


def test_floor_comes_from_the_hca_rate_else_the_nic_speed():
    assert rail_floor(Rail("mlx5_0", "mlx5_0", "ibp1", 0, 400.0)).limit == pytest.approx(RATE_FLOOR_FRACTION * 50)
    assert rail_floor(Rail("eth1", None, "eth1", None, None, 25000)).limit == pytest.approx(RATE_FLOOR_FRACTION * 3.125)
    assert rail_floor(Rail("lo", None, "lo", None)) is None


def judge(rows, rail: Rail, spec=None):
    args = argparse_run()
    payload = {"world_size": 2, "rows": rows, "backend": "gloo", "timing": "perf_counter"}
    return multinode.judge_run(payload, 0, "", args, spec, None, rail=rail_peak(rail), floor=rail_floor(rail))


def argparse_run():
    import argparse
    return argparse.Namespace(nnodes=2, nproc_per_node=1, node_rank=0, master_addr="10.0.0.1", launcher="torchrun",
                              backend="gloo")


def test_real_pair_figures_are_judged_against_the_rail_floor():
    slow_nic = Rail("eth1", None, "eth1", None, None, 10000)  # floor 0.875 GB/s; measured 0.63
    record = judge(ROWS, slow_nic)
    assert record["status"] == "FAIL"
    outcome = outcome_of(record, "h0", "h1", "eth1", 2)
    assert (outcome.status, outcome.round, outcome.busbw_gbps) == ("fail", 2, pytest.approx(0.633, abs=0.01))
    assert outcome.floor_gbps == pytest.approx(0.875)
    assert judge(ROWS, Rail("eth1", None, "eth1", None, None, 5000))["status"] == "PASS"  # floor 0.4375


def test_a_pair_figure_above_the_rails_peak_is_never_pass():
    tiny = Rail("eth1", None, "eth1", None, None, 1000)  # peak 2 x 0.125 = 0.25 GB/s < 0.63 measured
    record = judge(ROWS, tiny, spec={"verify": {"thresholds": {"nccl_allreduce_internode_busbw_gbps": 0.1}}})
    assert record["status"] == "ERROR"
    assert outcome_of(record, "h0", "h1", "eth1", 1).status == "error"


def test_an_unreachable_side_makes_it_the_culprit():
    assert outcome_of(None, "h0", "h1", "eth1", 1).culprit == "h0"
    assert outcome_of({"status": "PASS"}, "h0", "h1", "eth1", 1, side1_ok=False).culprit == "h1"


def test_a_rail_that_does_not_exist_here_is_an_error_without_starting_torch(tmp_path, capsys):
    from verify.fleet.nccl_pair import launch

    args = build_parser().parse_args(["launch", "--a", "h0", "--b", "h1", "--side", "1", "--rail", "mlx5_9",
                                      "--master-addr", "10.0.0.1", "--out", str(tmp_path / "o.json")])
    [record] = launch(args, root=str(sysfs(tmp_path)))
    assert record["status"] == "ERROR" and "mlx5_9 does not exist on h1" in record["reason"]
    assert record["details"]["culprit"] == "h1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_both_sides_of_a_pair_run_gloo_over_one_interface(tmp_path):
    pytest.importorskip("torch")
    common = ["--a", "h0", "--b", "h1", "--rail", "lo", "--master-addr", "127.0.0.1", "--master-port",
              str(free_port()), "--backend", "gloo", "--min-bytes", "1M", "--max-bytes", "1M", "--iters", "2",
              "--warmup", "1", "--timeout-s", "60"]
    procs = [subprocess.Popen([sys.executable, "-m", "verify.fleet.nccl_pair", "launch", "--side", str(side), *common,
                               "--result-file", str(tmp_path / f"m{side}.json"),
                               "--out", str(tmp_path / f"o{side}.json")],
                              cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for side in (0, 1)]
    outs = [p.communicate(timeout=180)[0] for p in procs]
    outcome = json.loads(outs[0].strip().splitlines()[-1])
    assert (outcome["a"], outcome["b"], outcome["rail"], outcome["status"]) == ("h0", "h1", "lo", "pass")
    assert outcome["busbw_gbps"] > 0
    side0 = json.loads((tmp_path / "o0.json").read_text())[0]
    assert side0["check_id"] == "fleet.nccl_pair.lo" and side0["details"]["env"]["GLOO_SOCKET_IFNAME"] == "lo"
    # send/recv ran between the two sides with the same loop, judged beside the all-reduce
    exchanged = side0["details"]["sendrecv"]
    assert exchanged["status"] == "PASS" and exchanged["busbw_gbps"] > 0
    assert [p["wrong"] for p in exchanged["curve"]] == [0]


def test_a_round_names_the_side_that_did_not_answer_and_keeps_side_zeros_figures():
    from verify.fleet.nccl_pair import answers_from_jobs, round_outcomes

    printed = json.dumps({"a": "h0", "b": "h1", "rail": "eth1", "status": "fail", "round": 1, "busbw_gbps": 0.01,
                          "floor_gbps": 0.06})
    jobs = {"alive": ["h0", "h1", "h2"],
            "jobs": {"h0": {"finished": 1, "rc": 0, "stdout": "noise\n" + printed},
                     "h1": {"finished": 1, "rc": 0, "stdout": ""},
                     "h2": {"finished": 1, "rc": 0, "stdout": ""},
                     "h3": {"finished": 1, "rc": 0, "stdout": ""}}}  # h3: Ansible lost it (not alive)
    side1 = json.dumps({"side": 1, "rail": "eth9", "status": "ERROR", "reason": "rail eth9 does not exist on h1",
                        "culprit": "h1"})
    jobs["jobs"]["h1"]["stdout"] = side1
    plan = [["h0", "h1", ["eth1", "eth9"]], ["h2", "h3", ["eth1"]], ["h3", "h2", ["eth1"]]]
    outcomes = round_outcomes(plan, answers_from_jobs(jobs), 2)
    got = [(o.a, o.b, o.rail, o.status, o.culprit, o.round) for o in outcomes]
    assert got == [("h0", "h1", "eth1", "fail", "", 2), ("h0", "h1", "eth9", "error", "h1", 2),
                   ("h2", "h3", "eth1", "error", "h3", 2), ("h3", "h2", "eth1", "error", "h3", 2)]
    assert outcomes[0].busbw_gbps == 0.01 and outcomes[0].floor_gbps == 0.06


def test_pair_matrix_keeps_the_latest_test_per_rail_and_colours_by_fraction_of_floor():
    outcomes = [{"a": "n1", "b": "n0", "rail": "eth1", "status": "fail", "round": 1, "busbw_gbps": 0.2,
                 "floor_gbps": 0.8},
                {"a": "n0", "b": "n2", "rail": "eth1", "status": "pass", "round": 2, "busbw_gbps": 0.9,
                 "floor_gbps": 0.8},
                {"a": "n3", "b": "n1", "rail": "eth1", "status": "error", "round": 2, "culprit": "n3"}]
    blame = [{"kind": "rail", "hosts": ["n1"], "rails": ["eth1"], "status": "FAIL", "evidence": outcomes[:1]}]
    section = pairs_section(outcomes, blame)
    assert section["hosts"] == ["n0", "n1", "n2", "n3"]
    first = section["cells"][0]
    assert (first["a"], first["b"], first["status"], first["worst_fraction"]) == ("n0", "n1", "fail", 0.25)
    assert section["blame"] == blame
    svg = heat_map_svg(section)
    assert svg.startswith("<svg") and svg.count("<rect") == 6  # 3 pairs, both triangles
    assert svg.count('fill="#d73027"') == 2 and svg.count('fill="#9e9e9e"') == 2
    assert heat_map_svg(pairs_section([], [])) == ""
