"""run_benchmarks and `tunefleet bench`: names, defaults from the desired state, crash isolation."""

from __future__ import annotations

import argparse
import json
import sys
import types

import pytest
from bench_helpers import output, scripted_node

import verify.bench as bench
from verify.bench import cli
from verify.result import Status


def test_names_default_to_the_desired_state_and_aliases_collapse(tmp_path):
    node = scripted_node(lambda a: output(a), root=str(tmp_path))
    spec = {"verify": {"benchmarks": ["perftest", "rdma", "ib"]}}
    results = bench.run_benchmarks(spec, None, node)
    assert [r.check_id for r in results] == ["bench.rdma"] and results[0].status == Status.SKIP


def test_unknown_name_is_an_error_and_does_not_stop_the_rest(tmp_path):
    node = scripted_node(lambda a: output(a), root=str(tmp_path))
    results = bench.run_benchmarks({}, None, node, ["warp-drive", "rdma"])
    assert results[0].status == Status.ERROR and "warp-drive" in results[0].reason
    assert results[1].check_id == "bench.rdma"


def test_a_crashing_family_becomes_one_error(monkeypatch, tmp_path):
    def crash(spec, profile, node, overrides):
        raise RuntimeError("boom")

    broken = types.ModuleType("verify.bench.broken")
    broken.run = crash
    monkeypatch.setitem(sys.modules, "verify.bench.broken", broken)
    monkeypatch.setitem(bench.FAMILIES, "broken", "verify.bench.broken")
    results = bench.run_benchmarks({}, None, scripted_node(lambda a: output(a)), ["broken"])
    assert results[0].status == Status.ERROR and "boom" in results[0].reason


def test_cli_runs_storage_and_writes_json(tmp_path, capsys):
    out = tmp_path / "r.json"
    args = argparse.Namespace(
        name="odirect",
        args=["--dir", str(tmp_path), "--size-bytes", "4M", "--engines", "odirect", "--tries", "1", "--json", str(out)],
    )
    assert cli.main(args) == 0
    data = json.loads(out.read_text())
    assert data[0]["check_id"] == "bench.storage.odirect" and data[0]["status"] == "PASS"
    assert "bench.storage.odirect" in capsys.readouterr().out


def test_cli_rejects_unknown_benchmark_and_profile(capsys):
    assert cli.main(argparse.Namespace(name="nope", args=[])) == 2
    assert cli.main(argparse.Namespace(name="nccl", args=["--profile", "h999"])) == 2
    assert "no hardware profile 'h999'" in capsys.readouterr().err
    assert cli.main(argparse.Namespace(name="list", args=[])) == 0


def _node_with(tmp_path, gpus: int, hcas: int = 0, perftest: bool = False):
    """The real Node over an empty tree, with the hardware the planner reads already detected."""
    from verify.facts.hardware import MEMO_KEY, GpuLinks, Hardware, Hca

    node = scripted_node(lambda a: output(a), root=str(tmp_path))
    node.memo[MEMO_KEY] = Hardware(
        gpus=[GpuLinks(i, "NVIDIA H100 80GB HBM3", f"00000000:0{i}:00.0", pcie_gen_max=5, pcie_width_max=16)
              for i in range(gpus)],
        hcas=[Hca(f"mlx5_{i}", 1, 400.0, "InfiniBand", True) for i in range(hcas)],
        perftest=perftest,
    )
    return node


def test_quick_set_on_a_node_without_gpu_or_hca_runs_storage_and_says_why_not_the_rest(tmp_path):
    chosen = bench.plan(["quick"], _node_with(tmp_path, 0))
    assert chosen.selection == "quick" and chosen.families == ["storage"]
    assert dict(chosen.skipped) == {
        "nccl": "needs 2 ranks, this node has 0 GPUs",
        "gpu": "no GPU on this node",
        "hostcopy": "no GPU on this node",
        "rdma": "no active RDMA port under /sys/class/infiniband",
    }


def test_quick_set_on_one_gpu_skips_the_all_reduce_and_measures_copies(tmp_path):
    chosen = bench.plan(["quick"], _node_with(tmp_path, 1, hcas=2))
    assert chosen.families == ["gpu", "hostcopy", "storage"]
    assert dict(chosen.skipped)["nccl"] == "needs 2 ranks, this node has 1 GPU"
    assert "perftest (ib_write_bw) is not installed: 2 active HCA" in dict(chosen.skipped)["rdma"]


def test_full_set_on_two_gpus_with_perftest_runs_everything_and_names_still_work(tmp_path):
    chosen = bench.plan(["full"], _node_with(tmp_path, 2, hcas=1, perftest=True))
    assert chosen.families == ["gpu", "nccl", "hostcopy", "storage", "rdma"] and chosen.skipped == []
    assert "burn" not in chosen.families  # the burn runs only when named (minutes of full power)
    named = bench.plan(["storage", "h2d", "nope"], _node_with(tmp_path, 0))
    assert named.selection == "named" and named.families == ["hostcopy", "storage"] and named.unknown == ["nope"]
    # A family named next to "quick" runs even where the hardware set would skip it (gloo on a CPU node).
    gloo = bench.plan(["quick"], _node_with(tmp_path, 0), {"nccl": {"backend": "gloo"}})
    assert "nccl" in gloo.families


def test_quick_sizes_then_desired_state_options_then_the_callers(tmp_path):
    spec = {"verify": {"bench_options": {"nccl": {"max_bytes": "2G", "iters": 5}, "storage": {"dir": "/data"}}}}
    assert bench.family_options("quick", "nccl", {}, None) == {"max_bytes": 1 << 30}
    assert bench.family_options("full", "nccl", {}, None) == {}
    assert bench.family_options("quick", "nccl", spec, None) == {"max_bytes": 2 << 30, "iters": 5}
    assert bench.family_options("quick", "storage", spec, {"storage": {"dir": "/x"}}) == {
        "size_bytes": 1 << 30, "dir": "/x"}


@pytest.mark.parametrize("options, message", [
    ({"warp": {}}, "verify_bench_options: unknown benchmark 'warp'"),
    ({"nccl": {"max_byte": 1}}, "verify_bench_options.nccl.max_byte: not an option of nccl"),
    ({"nccl": {"iters": "many"}}, "verify_bench_options.nccl.iters: 'many' must be a whole number"),
    ({"storage": {"size_bytes": "lots"}}, "verify_bench_options.storage.size_bytes: 'lots' not a size"),
    ({"hostcopy": {"timeout_s": True}}, "verify_bench_options.hostcopy.timeout_s: True must be a number"),
    (["nccl"], "verify_bench_options must be a mapping"),
])
def test_bad_bench_options_are_refused_naming_the_option(options, message):
    with pytest.raises(ValueError) as caught:
        bench.check_options(options)
    assert message in str(caught.value)


def test_bad_bench_options_stop_verify_before_anything_is_written(tmp_path, capsys):
    from verify.cli import main

    vars_file = tmp_path / "v.json"
    vars_file.write_text(json.dumps({"verify_bench_options": {"storage": {"queue_depth": -1}}}))
    code = main(["verify", "--local", "--vars", str(vars_file), "--out", str(tmp_path / "out"), "--quiet"])
    assert code == 2 and "verify_bench_options.storage.queue_depth: -1" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_auto_profile_says_which_and_how(tmp_path):
    from verify.local_run import choose_profile

    spec = {"verify": {"profile": "auto"}}
    h200 = {"gpus": {"gpus": [{"name": "NVIDIA H200"}, {"name": "NVIDIA H200"}]}}
    profile, how = choose_profile(spec, h200)
    assert profile["name"] == "h200-x2-nvlink" and how.startswith("h200-x2-nvlink: auto")
    h100 = {"gpus": {"gpus": [{"name": "NVIDIA H100 80GB HBM3"}]}}
    node = _node_with(tmp_path, 1)
    node.live = True
    profile, how = choose_profile(spec, h100, node)
    assert profile is None
    assert how.startswith("derived from link peaks: no shipped profile matches 1x NVIDIA H100 80GB HBM3, no NVLink,"
                          " PCIe Gen5 x16, no active HCA; floors: host copies >= 0.7 x the PCIe link")
    named, how = choose_profile({"verify": {"profile": "h100-sxm-8x"}}, h100)
    assert named["name"] == "h100-sxm-8x" and "named by the desired state" in how
