"""The cross-node launchers with NCCL (issue 50): the pair launcher (verify/fleet/nccl_pair.py) runs each side on
its own GPU with NCCL_DEBUG=INFO (and, with --one-machine, as its own NCCL host with NCCL's intra-node transports
off), and the pair's and the fleet all-reduce's records show and judge the transport NCCL reported. The real
launchers run with the one command runner replaced: it writes the measurement the worker would and prints the
NCCL lines a real run prints (tests/fixtures/nccl_transport)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from verify import runner
from verify.bench import nccl_transport
from verify.fleet import multinode, nccl_pair
from verify.judging import peaks, verdicts

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
# A real 2-node all-reduce's rows (molecule fleet scenario, tests/fixtures/fleet/README.md).
ROWS = json.loads((FIXTURES / "fleet/crossnode_allreduce_gloo_2node.json").read_text())[0]["details"]["curve"]
LO_LINES = """h:10:11 [0] NCCL INFO NET/IB : No device found.
h:10:11 [0] NCCL INFO NET/Socket : Using [0]lo:127.0.0.1<0>
h:10:11 [0] NCCL INFO Using network Socket
h:10:12 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0
h:10:12 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/Socket/0
"""
P2P_LINES = "h:10:12 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM\n"
PCIE = peaks.Peak(63.0, "PCIe Gen5 x16 = 63.0 GB/s per direction (test)")


@pytest.fixture
def launched(monkeypatch):
    """Replace the runner: write the worker's measurement where the launcher's argv says, print `lines`."""
    seen = {}

    def run_command(argv, timeout_s=60.0, env=None, cwd=None):
        out = argv[argv.index("--out") + 1]
        Path(out).write_text(json.dumps({"world_size": 2, "backend": "nccl", "timing": "cuda-events",
                                         "rows": [{k: r[k] for k in multinode.measurement_schema()["rows"].item}
                                                  for r in ROWS]}))
        seen.update(argv=argv, env=dict(env or {}))
        return runner.CommandOutput(list(argv), 0, seen["lines"], "", 1.0)

    monkeypatch.setattr(runner, "run_command", run_command)
    monkeypatch.setattr(nccl_transport, "local_pcie_peak", lambda: PCIE)
    return seen


def pair(tmp_path, launched, lines: str, spec: dict, *extra: str) -> dict:
    (tmp_path / "sys/class/net/lo").mkdir(parents=True)
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    launched["lines"] = lines
    args = nccl_pair.build_parser().parse_args([
        "launch", "--a", "node-a", "--b", "node-b", "--side", "0", "--rail", "lo", "--master-addr", "127.0.0.1",
        "--backend", "nccl", "--spec", str(tmp_path / "spec.json"), "--result-file", str(tmp_path / "m"),
        "--out", str(tmp_path / "o.json"), *extra])
    [record] = nccl_pair.launch(args, root=str(tmp_path))
    return record


def test_a_pair_on_one_machine_pins_its_gpu_and_takes_nccls_network_transport(tmp_path, launched):
    record = pair(tmp_path, launched, LO_LINES, {"gpu": {"rdma_expected": False}}, "--gpu", "1", "--one-machine")
    env = launched["env"]
    assert (env["CUDA_VISIBLE_DEVICES"], env["CUDA_DEVICE_ORDER"]) == ("1", "PCI_BUS_ID")
    assert (env["NCCL_P2P_DISABLE"], env["NCCL_SHM_DISABLE"], env["NCCL_NVLS_ENABLE"]) == ("1", "1", "0")
    assert env["NCCL_HOSTID"] == "tunefleet-node-a" and env["NCCL_DEBUG"] == "INFO"
    assert env["NCCL_SOCKET_IFNAME"] == "=lo" and env["NCCL_IB_DISABLE"] == "1"
    assert record["status"] == "PASS" and record["reason"].startswith("NCCL NET/Socket over lo: busbw")
    assert record["details"]["crossnode_transport"]["bound"]["gbps"] == 63.0
    assert record["details"]["crossnode_transport"]["lines"] == LO_LINES.splitlines()
    assert record["check_id"] == "fleet.nccl_pair.lo" and record["role"] == "fleet"
    outcome = nccl_pair.outcome_of(record, "node-a", "node-b", "lo", 1)
    assert outcome.status == "pass" and "NET/Socket over lo" in outcome.reason


def test_a_fleet_pair_without_one_machine_keeps_the_hosts_own_transports(tmp_path, launched):
    pair(tmp_path, launched, LO_LINES, {}, "--gpu", "0")
    assert "NCCL_HOSTID" not in launched["env"] and "NCCL_P2P_DISABLE" not in launched["env"]
    assert launched["env"]["NCCL_DEBUG_SUBSYS"] == "INIT,ENV,NET"


def test_the_planted_fault_rdma_expected_and_sockets_taken_fails_the_pair_with_its_cause(tmp_path, launched):
    record = pair(tmp_path, launched, LO_LINES, {"gpu": {"rdma_expected": True}}, "--gpu", "0", "--one-machine")
    assert record["status"] == "FAIL"
    assert record["details"]["cause"]["class"] == "nccl-socket-not-rdma"
    assert record["details"][verdicts.ACTION_KEY] == verdicts.FIX_CONFIG
    assert nccl_pair.outcome_of(record, "node-a", "node-b", "lo", 1).status == "fail"


def test_a_pair_that_never_crossed_a_network_transport_is_no_evidence(tmp_path, launched):
    record = pair(tmp_path, launched, P2P_LINES, {}, "--gpu", "0")
    assert record["status"] == "ERROR"
    assert nccl_pair.outcome_of(record, "node-a", "node-b", "lo", 1).status == "error"


def test_a_figure_above_the_socket_transports_bound_is_error(tmp_path, launched, monkeypatch):
    monkeypatch.setattr(nccl_transport, "local_pcie_peak", lambda: peaks.Peak(0.1, "a tiny link (test)"))
    record = pair(tmp_path, launched, LO_LINES, {}, "--gpu", "0")
    assert record["status"] == "ERROR" and "above what the socket transport can carry" in record["reason"]


def test_a_gpu_index_that_is_no_index_is_refused_naming_the_option(capsys):
    with pytest.raises(SystemExit) as stop:
        nccl_pair.build_parser().parse_args(["launch", "--a", "x", "--b", "y", "--side", "0", "--rail", "lo",
                                             "--master-addr", "127.0.0.1", "--out", "o", "--gpu", "-1"])
    assert stop.value.code == 2 and "--gpu '-1'" in capsys.readouterr().err


def test_the_fleet_all_reduce_shows_and_judges_the_transport_too(tmp_path, launched):
    launched["lines"] = LO_LINES
    (tmp_path / "spec.json").write_text(json.dumps({"gpu": {"rdma_expected": True}}))
    args = multinode.build_parser().parse_args([
        "launch", "--nnodes", "2", "--node-rank", "0", "--master-addr", "127.0.0.1", "--nproc-per-node", "1",
        "--spec", str(tmp_path / "spec.json"), "--result-file", str(tmp_path / "m.json"),
        "--out", str(tmp_path / "o.json")])
    assert multinode.launch(args) == 0
    assert launched["env"]["NCCL_DEBUG"] == "INFO"
    [record] = json.loads((tmp_path / "o.json").read_text())
    assert record["status"] == "FAIL" and record["details"]["cause"]["class"] == "nccl-socket-not-rdma"
    assert "NET/Socket over lo" in record["reason"]


def test_the_socket_bound_is_the_gpus_pcie_link_or_twice_a_slower_nic():
    assert peaks.socket_transport_bound(PCIE, None, "lo").gbps == 63.0
    nic = peaks.socket_transport_bound(PCIE, 25000, "eth1")
    assert nic.gbps == pytest.approx(6.25) and "eth1 at 25000 Mb/s" in nic.source
    assert peaks.socket_transport_bound(None, None, "lo") is None
