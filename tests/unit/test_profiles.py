"""Hardware profiles: every shipped number has a source; overrides beat profiles beat derived values."""

from __future__ import annotations

import json

import pytest

from verify import profiles
from verify.judging.thresholds import Threshold
from verify.profiles import ProfileError, load_profile, resolve_threshold, validate_profile

SHIPPED = ["a100-sxm-8x", "b200-8x", "h100-sxm-8x", "h200-sxm-8x", "h200-x2-nvlink"]


def test_the_required_hardware_classes_ship():
    assert profiles.list_profiles() == SHIPPED


@pytest.mark.parametrize("name", SHIPPED)
def test_every_threshold_has_a_source_and_a_sane_band(name):
    profile = load_profile(name)
    assert profile["thresholds"], name
    for key, entry in profile["thresholds"].items():
        assert key in profiles.KEYS
        assert len(entry["source"]) > 20, f"{name}:{key} source too thin"
        if "warn" in entry and "min" in entry:
            assert entry["warn"] >= entry["min"], f"{name}:{key} warn band below the floor"
    assert isinstance(profile["vars"], dict)


def test_nvls_and_gpu_count_per_class():
    assert load_profile("h100-sxm-8x")["nvls_expected"] is True
    assert load_profile("a100-sxm-8x")["nvls_expected"] is False
    assert load_profile("h200-x2-nvlink")["gpu_count"] == 2


def test_resolution_order():
    profile = load_profile("h200-sxm-8x")
    derived = Threshold(limit=1.0, source="derived")
    assert resolve_threshold("nccl_allreduce_busbw_gbps", profile, None).limit == 431
    spec = {"verify": {"thresholds": {"nccl_allreduce_busbw_gbps": 365}}}
    assert resolve_threshold("nccl_allreduce_busbw_gbps", profile, spec).limit == 365
    spec = {"verify": {"thresholds": {"nccl_allreduce_busbw_gbps": {"min": 360, "warn": 370}}}}
    assert resolve_threshold("nccl_allreduce_busbw_gbps", profile, spec).warn == 370
    assert resolve_threshold("storage_cufile_gbps", profile, None, derived) is derived
    assert resolve_threshold("storage_cufile_gbps", None, None) is None
    assert resolve_threshold("rdma_lat_us", None, {"verify": {"thresholds": {"rdma_lat_us": 3}}}).kind == "max"


def test_bad_inputs_name_the_problem():
    with pytest.raises(ProfileError, match="no hardware profile 'h300'"):
        load_profile("h300")
    good = load_profile("a100-sxm-8x")
    broken = json.loads(json.dumps(good))
    broken["thresholds"]["nccl_allreduce_busbw_gbps"]["source"] = ""
    with pytest.raises(ProfileError, match="nccl_allreduce_busbw_gbps' has no source"):
        validate_profile(broken, "x.json")
    broken = json.loads(json.dumps(good))
    broken["thresholds"]["busbw"] = {"min": 1, "source": "s"}
    with pytest.raises(ProfileError, match="unknown threshold 'busbw'"):
        validate_profile(broken, "x.json")
    with pytest.raises(ProfileError, match="needs a numeric 'min'"):
        resolve_threshold("h2d_gbps", None, {"verify": {"thresholds": {"h2d_gbps": {"warn": 3}}}})
    with pytest.raises(ProfileError, match="must be a number or a mapping"):
        resolve_threshold("h2d_gbps", None, {"verify": {"thresholds": {"h2d_gbps": "fast"}}})


def test_profiles_command_lists_each_profile(capsys):
    assert profiles.main(None) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == len(SHIPPED) + 1 and out.startswith("PROFILE ")  # a header, then one line each
    assert "h200-x2-nvlink" in out and ">= 308 GB/s" in out


def _facts(*names):
    return {"gpus": {"source": "nvidia-smi", "gpus": [{"index": i, "name": n} for i, n in enumerate(names)]}}


def test_auto_pick_matches_gpu_name_and_count():
    # the names nvidia-smi printed on the GPU machine (tests/fixtures/node/gpu_machine/nvidia-smi-query-gpu.csv)
    assert profiles.pick_profile(_facts("NVIDIA H200", "NVIDIA H200"))["name"] == "h200-x2-nvlink"
    assert profiles.pick_profile(_facts(*["NVIDIA H100 80GB HBM3"] * 8))["name"] == "h100-sxm-8x"
    assert profiles.pick_profile(_facts(*["NVIDIA A100-SXM4-80GB"] * 8))["name"] == "a100-sxm-8x"
    assert profiles.pick_profile(_facts(*["NVIDIA H100 PCIe"] * 8)) is None
    assert profiles.pick_profile(_facts(*["NVIDIA H200"] * 4)) is None
    assert profiles.pick_profile({"gpus": {"gpus": []}}) is None


def test_internode_floor_is_settable_from_the_desired_state():
    spec = {"verify": {"thresholds": {"nccl_allreduce_internode_busbw_gbps": 48}}}
    assert resolve_threshold("nccl_allreduce_internode_busbw_gbps", None, spec).limit == 48


def _inventory(name: str, count: int, memory_mib=None):
    return {"gpus": {"source": "nvml", "gpus": [{"index": i, "name": name, "memory_mib": memory_mib}
                                                for i in range(count)]}}


def test_auto_by_model_gives_the_one_gpu_h100_its_measured_floors():
    # name and memory.total as NVML gave them on the 1x H100 (tests/fixtures/node/health/h100x1/cmd/nvidia-smi-q.stdout)
    facts = _inventory("NVIDIA H100 80GB HBM3", 1, 81559)
    assert profiles.pick_profile(facts) is None  # without by_model: the exact profiles only, as the health checks ask
    profile = profiles.pick_profile(facts, by_model=True)
    assert profile["name"] == "h100-sxm-1x-model" and profile["gpu_count"] == 1
    assert profile["floor_basis"] == "measured" and "measured healthy h100-sxm" in profile["auto_how"]
    matmul = profile["thresholds"]["gpu_matmul_bf16_tflops"]
    assert matmul["min"] == pytest.approx(0.9 * 789.4, abs=0.1)
    assert matmul["warn"] == pytest.approx(0.95 * 789.4, abs=0.1)
    assert matmul["source"].startswith("measured: 0.9x / 0.95x of 789.4") and "docs/measurements.md" in matmul["source"]
    assert profile["thresholds"]["gpu_hbm_gbps"]["min"] == pytest.approx(0.9 * 3017.0, abs=0.1)
    assert profile["thresholds"]["h2d_gbps"]["min"] == pytest.approx(0.9 * 55.2, abs=0.1)
    assert "nvlink_links_per_gpu" not in profile["thresholds"]  # one GPU alone: no link to expect
    assert profiles.resolve_threshold("gpu_matmul_bf16_tflops", profile, None).limit == matmul["min"]
    validate_profile(profile, "again")  # what auto returns is a valid profile


def test_auto_by_model_any_count_and_the_shipped_profile_keeps_its_own_floors():
    four = profiles.pick_profile(_inventory("NVIDIA H200", 4, 143771), by_model=True)
    assert four["name"] == "h200-sxm-4x-model" and four["gpu_count"] == 4 and four["nvls_expected"] is None
    assert four["thresholds"]["nvlink_links_per_gpu"]["min"] == 18
    assert four["thresholds"]["nvlink_link_gbps"]["min"] == 26.5
    assert "gpu_copy_gbps" not in four["thresholds"]  # measured on 2 GPUs joined by NV18 only
    eight = profiles.pick_profile(_inventory("NVIDIA H100 80GB HBM3", 8), by_model=True)
    shipped = load_profile("h100-sxm-8x")
    assert eight["name"] == "h100-sxm-8x" and eight["thresholds"]["h2d_gbps"] == shipped["thresholds"]["h2d_gbps"]
    assert eight["thresholds"]["gpu_matmul_bf16_tflops"]["source"].startswith("measured:")  # a key it lacked
    assert "gpu_matmul_bf16_tflops from model h100-sxm (measured)" in eight["auto_how"]
    two = profiles.pick_profile(_inventory("NVIDIA H200", 2), by_model=True)
    assert two["name"] == "h200-x2-nvlink" and two["thresholds"]["gpu_matmul_bf16_tflops"]["min"] == 724


def test_auto_by_model_falls_back_to_the_datasheet_and_refuses_mixed_or_unknown_gpus():
    l4 = profiles.pick_profile(_inventory("NVIDIA L4", 3), by_model=True)
    assert l4["floor_basis"] == "datasheet" and "l4 datasheet" in l4["auto_how"]
    assert l4["thresholds"]["gpu_hbm_gbps"]["min"] == pytest.approx(0.75 * 300)
    assert l4["thresholds"]["gpu_matmul_bf16_tflops"]["source"].startswith("datasheet: 0.55x / 0.6x of l4 datasheet")
    mixed = {"gpus": {"gpus": [{"name": "NVIDIA H100 80GB HBM3"}, {"name": "NVIDIA L4"}]}}
    assert profiles.pick_profile(mixed, by_model=True) is None
    assert profiles.pick_profile(_inventory("NVIDIA GeForce RTX 4090", 1), by_model=True) is None
    assert profiles.pick_profile({"gpus": {"gpus": ["garbage", None]}}, by_model=True) is None
