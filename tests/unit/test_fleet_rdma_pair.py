"""A fleet RDMA pair: perftest's own measuring and judging, with both ends named."""
from __future__ import annotations

from pathlib import Path

from verify.bench import perftest
from verify.fleet.rdma_pair import pair_passed, pair_results
from verify.node import Node
from verify.runner import CommandOutput

BENCH = Path(__file__).resolve().parent.parent / "fixtures" / "bench"


def fake_hca(root: Path, rate: str = "400 Gb/sec (4X NDR)") -> None:
    port = root / "sys" / "class" / "infiniband" / "mlx5_0" / "ports" / "1"
    port.mkdir(parents=True)
    (port / "rate").write_text(rate + "\n")
    (port / "link_layer").write_text("InfiniBand\n")
    (port / "state").write_text("4: ACTIVE\n")


def replaying(stdout: str):
    calls = []

    def run(argv, timeout_s=60.0, env=None, cwd=None):
        calls.append(list(argv))
        return CommandOutput(list(argv), 0, stdout if argv[0] != "ssh" else "", "", 0.1)

    return run, calls


def test_a_slow_pair_fails_naming_the_server_and_the_client(tmp_path):
    fake_hca(tmp_path)
    run, calls = replaying((BENCH / "perftest_ib_write_bw_gbits_issue273.txt").read_text())
    node = Node(root=str(tmp_path), runner=run)
    results = perftest.run(None, None, node, {"peer": "10.0.0.2", "tool_dir": "/usr/bin", "tries": 1,
                                                 "server_start_s": 0})
    records = pair_results(results, "gpu-b", "gpu-a")
    assert [r["check_id"] for r in records] == ["fleet.rdma_pair.gpu-b.mlx5_0.write_bw"]
    assert records[0]["status"] == "FAIL"  # 0.48 Gb/s against 0.9 x 400 Gb/s
    assert records[0]["reason"].startswith("with gpu-b as server: 0.5 Gb/s")
    assert records[0]["details"]["server"] == "gpu-b" and records[0]["details"]["client"] == "gpu-a"
    assert pair_passed(records) is False
    assert any(c[:5] == ["ssh", "-o", "BatchMode=yes", "--", "10.0.0.2"] for c in calls)


def test_hosts_without_an_hca_give_no_verdict_on_the_pair(tmp_path):
    records = pair_results(perftest.run(None, None, Node(root=str(tmp_path)), {"peer": "x"}), "b", "a")
    assert [r["status"] for r in records] == ["SKIP"]
    assert pair_passed(records) is None
