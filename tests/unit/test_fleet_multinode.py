"""Multi-node all-reduce: launcher command lines and the per-host verdict."""
from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from verify.bench.torch_allreduce import bus_factor, sweep
from verify.fleet.multinode import CHECK_ID, build_parser, judge_run, launcher_argv, main, run_profile, verdict
from verify.profiles import load_profile

REPO = Path(__file__).resolve().parent.parent.parent

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "fleet" / "crossnode_allreduce_gloo_2node.json"


def launch_args(*extra: str):
    args = build_parser().parse_args(["launch", "--nnodes", "3", "--node-rank", "1", "--master-addr", "10.0.0.1",
                                      "--nproc-per-node", "8", "--hosts", "a,b,c", "--out", "x.json", *extra])
    args.result_file = "/tmp/m.json"
    return args


def test_torchrun_gets_the_rendezvous_and_this_node_rank():
    argv = launcher_argv(launch_args())
    # torchrun and each rank: isolated (-I), the module named after the bootstrap's import directories
    assert argv[1:4] == ["-I", "-u", "-c"] and argv[6] == "torch.distributed.run" and argv[7] == "--no-python"
    assert {"--nnodes=3", "--nproc-per-node=8", "--node-rank=1", "--master-addr=10.0.0.1",
            "--master-port=29531"} <= set(argv)
    rank = argv[argv.index(sys.executable, 1):]
    assert rank[1:4] == ["-I", "-u", "-c"] and rank[6:8] == ["verify.fleet.multinode", "worker"]


def test_mpirun_and_srun_start_every_rank_of_every_host():
    mpi = launcher_argv(launch_args("--launcher", "mpirun"))
    assert mpi[:5] == ["mpirun", "--host", "a:8,b:8,c:8", "-np", "24"]
    assert "PYTHONPATH" not in mpi and mpi[mpi.index(sys.executable) + 1] == "-I"
    srun = launcher_argv(launch_args("--launcher", "srun"))
    assert srun[:3] == ["srun", "--nodes=3", "--ntasks-per-node=8"]


def test_the_first_host_judges_the_measured_curve_and_the_others_record_taking_part():
    measured = json.loads(FIXTURE.read_text())[0]
    payload = {"world_size": 2, "backend": "gloo", "rows": measured["details"]["curve"]}
    args = build_parser().parse_args(["launch", "--nnodes", "2", "--node-rank", "0", "--master-addr", "h0",
                                      "--nproc-per-node", "1", "--backend", "gloo", "--out", "x"])
    first = judge_run(payload, 0, "", args, {"verify": {"thresholds": {}}})
    assert first["check_id"] == CHECK_ID and first["status"] == "PASS"
    assert first["observed"] == round(measured["observed"], 2)  # the report rounds busbw to 0.01 GB/s
    assert first["details"]["unit"] == "GB/s" and len(first["details"]["curve"]) == 3
    args.node_rank = 1
    assert "took part in the 2-node all-reduce judged on h0" in judge_run(None, 0, "", args, None)["reason"]


def test_wrong_sums_or_a_dead_rank_are_never_a_pass():
    measured = json.loads(FIXTURE.read_text())[0]
    rows = [dict(r, wrong=3) for r in measured["details"]["curve"]]
    args = build_parser().parse_args(["launch", "--nnodes", "2", "--node-rank", "0", "--master-addr", "h0",
                                      "--nproc-per-node", "1", "--backend", "gloo", "--out", "x"])
    assert judge_run({"world_size": 2, "rows": rows}, 0, "", args, None)["status"] == "FAIL"
    died = judge_run(None, 1, "RuntimeError: Connection refused", args, None)
    assert died["status"] == "ERROR" and "exited 1" in died["reason"]
    assert died["details"]["output_tail"].startswith("RuntimeError")
    assert judge_run(None, None, "", args, None)["reason"].endswith("timed out on this host")


def test_a_worker_outside_a_launcher_says_so():
    with pytest.raises(RuntimeError, match="start the worker through a launcher"):
        main(["worker", "--backend", "gloo", "--out", "/tmp/unused.json"])


def judge_args(*extra: str):
    return build_parser().parse_args(["launch", "--nnodes", "2", "--node-rank", "0", "--master-addr", "h0",
                                      "--nproc-per-node", "1", "--backend", "gloo", "--out", "x", *extra])


def measured_payload() -> dict:
    measured = json.loads(FIXTURE.read_text())[0]
    return {"world_size": 2, "backend": "gloo", "rows": measured["details"]["curve"]}


def with_internode_floor(name: str, floor: float) -> dict:
    profile = load_profile(name)
    profile["thresholds"]["nccl_allreduce_internode_busbw_gbps"] = {"min": floor, "source": "test"}
    return profile


def test_the_internode_floor_of_the_profile_decides_pass_or_fail():
    payload, args = measured_payload(), judge_args()
    observed = judge_run(payload, 0, "", args, None)["observed"]
    shipped = judge_run(payload, 0, "", args, None, load_profile("h100-sxm-8x"))
    assert shipped["status"] == "FAIL" and shipped["expected"] == ">= 345 GB/s busbw"
    assert shipped["details"]["profile"] == "h100-sxm-8x" and "switch ports" in shipped["remediation"]
    below = judge_run(payload, 0, "", args, None, with_internode_floor("h100-sxm-8x", observed * 0.9))
    above = judge_run(payload, 0, "", args, None, with_internode_floor("h100-sxm-8x", observed * 1.1))
    assert (below["status"], above["status"]) == ("PASS", "FAIL")
    # verify_thresholds in the desired state win over the profile, as on one node.
    spec = {"verify": {"thresholds": {"nccl_allreduce_internode_busbw_gbps": observed * 0.5}}}
    assert judge_run(payload, 0, "", args, spec, load_profile("h100-sxm-8x"))["status"] == "PASS"


def test_the_profile_comes_from_the_desired_state_or_the_command_line():
    spec = {"verify": {"profile": "h100-sxm-8x", "thresholds": {}}}
    assert run_profile(judge_args(), spec)["name"] == "h100-sxm-8x"
    assert run_profile(judge_args("--profile", "b200-8x"), spec)["name"] == "b200-8x"
    assert run_profile(judge_args(), {"verify": {"thresholds": {}}}) is None
    record = verdict(measured_payload(), 0, "", judge_args(), {"verify": {"profile": "no-such-gpu"}})
    assert record["status"] == "ERROR" and "no-such-gpu" in record["reason"]
    # Only the host holding the measurement needs a profile: the others never load one.
    other = judge_args()
    other.node_rank = 1
    assert verdict(None, 0, "", other, {"verify": {"profile": "no-such-gpu"}})["status"] == "PASS"


@pytest.mark.slow
def test_the_fleet_all_reduce_runs_the_shared_loop_for_real_on_gloo(tmp_path):
    """torchrun, two gloo ranks on this host, the worker's shared loop, the profile's floor applied."""
    pytest.importorskip("torch")
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"verify": {"profile": "h100-sxm-8x", "thresholds": {}}}))
    out, measurement = tmp_path / "crossnode.json", tmp_path / "measurement.json"
    with socket.socket() as sock:  # a free port for the rendezvous
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    argv = [sys.executable, "-m", "verify.fleet.multinode", "launch", "--backend", "gloo", "--nnodes", "1",
            "--node-rank", "0", "--nproc-per-node", "2", "--master-addr", "127.0.0.1", "--master-port", str(port),
            "--min-bytes", "4K", "--max-bytes", "64K", "--iters", "3", "--warmup", "1", "--timeout-s", "60",
            "--spec", str(spec), "--result-file", str(measurement), "--out", str(out)]
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    payload = json.loads(measurement.read_text())
    assert payload["world_size"] == 2 and payload["timing"] == "perf_counter"
    assert [r["size_bytes"] for r in payload["rows"]] == sweep(4096, 65536)
    assert all(r["wrong"] == 0 and r["busbw_gbps"] > 0 for r in payload["rows"])
    # 2 ranks: busbw = algbw * 2(n-1)/n = algbw, the same bus factor as the one-node engine.
    assert all(r["busbw_gbps"] == pytest.approx(r["algbw_gbps"] * bus_factor(2)) for r in payload["rows"])
    record = json.loads(out.read_text())[0]
    assert record["check_id"] == CHECK_ID and record["status"] == "FAIL"  # a CPU is far below 345 GB/s
    assert record["expected"] == ">= 345 GB/s busbw" and record["details"]["profile"] == "h100-sxm-8x"
    assert record["details"]["timing"] == "perf_counter"
