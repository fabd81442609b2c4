"""Multi-node all-reduce: launcher command lines and the per-host verdict."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from verify.fleet.multinode import CHECK_ID, build_parser, judge_run, launcher_argv, main

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "fleet" / "crossnode_allreduce_gloo_2node.json"


def launch_args(*extra: str):
    args = build_parser().parse_args(["launch", "--nnodes", "3", "--node-rank", "1", "--master-addr", "10.0.0.1",
                                      "--nproc-per-node", "8", "--hosts", "a,b,c", "--out", "x.json", *extra])
    args.result_file = "/tmp/m.json"
    return args


def test_torchrun_gets_the_rendezvous_and_this_node_rank():
    argv = launcher_argv(launch_args())
    assert argv[1:3] == ["-m", "torch.distributed.run"]
    assert {"--nnodes=3", "--nproc-per-node=8", "--node-rank=1", "--master-addr=10.0.0.1",
            "--master-port=29531"} <= set(argv)
    assert argv[argv.index("-m", 3) + 1:][:2] == ["verify.fleet.multinode", "worker"]


def test_mpirun_and_srun_start_every_rank_of_every_host():
    mpi = launcher_argv(launch_args("--launcher", "mpirun"))
    assert mpi[:5] == ["mpirun", "--host", "a:8,b:8,c:8", "-np", "24"]
    srun = launcher_argv(launch_args("--launcher", "srun"))
    assert srun[:3] == ["srun", "--nodes=3", "--ntasks-per-node=8"]


def test_the_first_host_judges_the_measured_curve_and_the_others_record_taking_part():
    measured = json.loads(FIXTURE.read_text())[0]
    payload = {"world_size": 2, "backend": "gloo", "rows": measured["details"]["curve"]}
    args = build_parser().parse_args(["launch", "--nnodes", "2", "--node-rank", "0", "--master-addr", "h0",
                                      "--nproc-per-node", "1", "--backend", "gloo", "--out", "x"])
    first = judge_run(payload, 0, "", args, {"verify": {"thresholds": {}}})
    assert first["check_id"] == CHECK_ID and first["status"] == "PASS"
    assert first["observed"] == pytest.approx(measured["observed"])
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
