"""run_benchmarks and `tunefleet bench`: names, defaults from the desired state, crash isolation."""

from __future__ import annotations

import argparse
import json
import sys
import types

import pytest
from bench_helpers import NODE_FIXTURES, output, scripted_node

import verify.bench as bench
from verify.bench import cli, nccl
from verify.bench.common import parse_size
from verify.profiles import list_profiles, load_profile
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


@pytest.mark.parametrize("name", list_profiles())
def test_the_quick_all_reduce_is_judged_at_the_size_its_profile_floor_was_measured(name):
    """A profile's busbw floor is its figure at the profile's largest size: the quick set's sweep reaches it."""
    profile = load_profile(name)
    quick = nccl.options_from(profile, bench.family_options("quick", "nccl", {}, None, profile))
    assert quick.max_bytes == parse_size(profile["bench"]["nccl_max_bytes"])
    asked = {"verify": {"bench_options": {"nccl": {"max_bytes": "1G"}}}}  # the operator's own size still wins
    assert nccl.options_from(profile, bench.family_options("quick", "nccl", asked, None, profile)).max_bytes == 1 << 30


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
    # issue 26: the one-GPU H100 gets its model's profile, floors from the healthy H100 measured
    assert profile["name"] == "h100-sxm-1x-model"
    assert how.startswith("h100-sxm-1x-model: auto") and "measured healthy h100-sxm" in how
    assert how.endswith("node: 1x NVIDIA H100 80GB HBM3, no NVLink, PCIe Gen5 x16, no active HCA")
    unknown = {"gpus": {"gpus": [{"name": "NVIDIA Quadro K2200"}]}}
    profile, how = choose_profile(spec, unknown, node)
    assert profile is None and how.startswith("derived from link peaks: no shipped profile matches")
    named, how = choose_profile({"verify": {"profile": "h100-sxm-8x"}}, h100)
    assert named["name"] == "h100-sxm-8x" and "named by the desired state" in how


# ---- hardware detection is total (issue 27 item 5) ---------------------------------------------------

NVLINK_STATUS = NODE_FIXTURES / "nvidia-smi-nvlink-status.txt"  # the 2x H200 machine's real output


def _gpu_node(tmp_path, nvlink_answer):
    """The real Node over an empty tree, live, whose NVML listed the 2x H200 machine's GPUs; `nvidia-smi nvlink
    --status` answers `nvlink_answer(argv)`."""
    from verify.facts.gpu_query import Gpu, GpuInventory

    node = scripted_node(lambda argv: nvlink_answer(argv) if argv[:2] == ["nvidia-smi", "nvlink"]
                         else output(argv, missing=True), root=str(tmp_path))
    node.live = True
    node.memo["gpus"] = GpuInventory("nvml", [Gpu(i, f"00000000:00:0{6 + i}.0", "NVIDIA H200", True, 143771)
                                              for i in range(2)])
    return node


def test_an_unreadable_nvlink_speed_is_a_reason_never_an_exception(tmp_path):
    from verify.facts.hardware import detect

    # the machine's real output with one speed no longer a plain number
    text = NVLINK_STATUS.read_text().replace("Link 3: 26.562 GB/s", "Link 3: N/A GB/s", 1)
    found = detect(_gpu_node(tmp_path, lambda argv: output(argv, stdout=text)))
    assert "unreadable speed" in found.nvlink_reason and "Link 3: N/A GB/s" in found.nvlink_reason
    assert [g.nvlink_links for g in found.gpus] == [0, 0] and found.nvlink_per_gpu() is None
    assert found.to_dict()["nvlink_reason"] == found.nvlink_reason
    assert "NVLink unknown (nvidia-smi nvlink --status line" in found.describe()
    refused = "Unable to determine the device handle"
    failed = detect(_gpu_node(tmp_path, lambda argv: output(argv, stderr=refused, returncode=255)))
    assert failed.nvlink_reason == "nvidia-smi nvlink --status failed: Unable to determine the device handle"
    healthy = detect(_gpu_node(tmp_path, lambda argv: output(argv, stdout=NVLINK_STATUS.read_text())))
    assert healthy.nvlink_reason == "" and [g.nvlink_links for g in healthy.gpus] == [18, 18]


def test_the_benchmark_phase_and_auto_run_through_an_unreadable_nvlink_speed(tmp_path):
    """A named or auto profile on such a node: the profile line and the derived floors are said, nothing raises."""
    from verify.bench.floors import derived_floors
    from verify.facts.hardware import detect
    from verify.local_run import choose_profile

    text = NVLINK_STATUS.read_text().replace("26.562 GB/s", "?? GB/s")
    node = _gpu_node(tmp_path, lambda argv: output(argv, stdout=text))
    profile, how = choose_profile({"verify": {"profile": "auto"}}, {"gpus": node.memo["gpus"].to_dict()}, node)
    assert profile["name"] == "h200-x2-nvlink" and "NVLink unknown" in how
    assert "all-reduce recorded only (NVLink unknown: nvidia-smi nvlink --status line" in derived_floors(detect(node))
    named, _ = choose_profile({"verify": {"profile": "h100-sxm-8x"}}, {}, node)
    assert named["name"] == "h100-sxm-8x"
