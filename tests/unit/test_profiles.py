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
    assert out.count("\n") == len(SHIPPED)
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
