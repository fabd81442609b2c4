"""Host<->device copies: the PCIe-derived judge on the 2x H200 capture, floors and overrides."""

from __future__ import annotations

import json

import pytest
from bench_helpers import fixture, output, scripted_node

from verify.bench import hostcopy
from verify.engine import RESULT_MARKER, read_result
from verify.profiles import load_profile, resolve_threshold
from verify.result import Status


def captured() -> dict:
    return read_result(fixture("h200x2_hostcopy.stdout"))


def test_a_copy_above_the_pcie_peak_is_an_error_not_a_pass():
    gpu0 = dict(captured()["gpus"][0], h2d_gbps=70.0)  # Gen5 x16 carries 63.0 GB/s per direction
    derived = hostcopy.judge_copy("h2d", gpu0, None, hostcopy.DERIVED_RATIO)
    assert derived.status == Status.ERROR and "measurement broken" in derived.reason
    assert "PCIe Gen5 x16" in derived.reason
    floor = resolve_threshold("h2d_gbps", load_profile("h200-x2-nvlink"), None)
    absolute = hostcopy.judge_copy("h2d", gpu0, floor, hostcopy.DERIVED_RATIO)
    assert absolute.status == Status.ERROR and "above the physical peak 63.02" in absolute.reason


def test_nan_or_negative_copy_rates_are_errors_even_without_a_known_link():
    for value in (float("nan"), -3.0, 99999999.0):
        gpu = {"index": 0, "name": "x", "pcie": {}, "d2h_gbps": value}
        assert hostcopy.judge_copy("d2h", gpu, None, hostcopy.DERIVED_RATIO).status == Status.ERROR
    real = {"index": 0, "name": "x", "pcie": {}, "d2h_gbps": 55.3}  # unknown link, a real figure: recorded
    assert hostcopy.judge_copy("d2h", real, None, hostcopy.DERIVED_RATIO).status == Status.PASS


def test_sysfs_peak_wins_when_nvml_reads_lower():
    from verify.judging.peaks import Peak

    gpu0 = dict(captured()["gpus"][0], h2d_gbps=60.0)
    gpu0["pcie"] = dict(gpu0["pcie"], gen_max=4)  # NVML says Gen4 (31.5 GB/s), sysfs Gen5
    verdict = hostcopy.judge_copy("h2d", gpu0, None, hostcopy.DERIVED_RATIO, Peak(63.015, "sysfs Gen5 x16"))
    assert verdict.status == Status.PASS


def test_real_h200_copies_pass_the_derived_pcie_ratio():
    gpu0 = captured()["gpus"][0]
    verdict = hostcopy.judge_copy("h2d", gpu0, None, hostcopy.DERIVED_RATIO)
    assert verdict.check_id == "bench.h2d.gpu0" and verdict.status == Status.PASS
    assert verdict.details["ratio"] == pytest.approx(0.8798, abs=0.001)
    assert "Gen5 x16" in verdict.reason


def test_link_trained_narrower_than_max_is_named():
    gpu = dict(captured()["gpus"][1])
    gpu["pcie"] = dict(gpu["pcie"], width_current=8)
    gpu["h2d_gbps"] = 27.6  # what an x8 link carries
    verdict = hostcopy.judge_copy("h2d", gpu, None, hostcopy.DERIVED_RATIO)
    assert verdict.status == Status.FAIL and "trained at x8 of x16" in verdict.reason


def test_profile_floor_wins_over_ratio_and_override_wins_over_profile():
    profile = load_profile("h200-x2-nvlink")
    gpu0 = captured()["gpus"][0]
    floor = resolve_threshold("d2h_gbps", profile, None)
    assert hostcopy.judge_copy("d2h", gpu0, floor, hostcopy.DERIVED_RATIO).status == Status.PASS
    spec = {"verify": {"thresholds": {"d2h_gbps": 60}}}
    stricter = resolve_threshold("d2h_gbps", profile, spec)
    verdict = hostcopy.judge_copy("d2h", gpu0, stricter, hostcopy.DERIVED_RATIO)
    assert verdict.status == Status.FAIL and verdict.expected == ">= 60 GB/s"


def test_run_gives_one_result_per_gpu_and_direction(monkeypatch):
    monkeypatch.setattr(hostcopy, "module_available", lambda name: True)
    node = scripted_node(lambda argv: output(argv, stdout=fixture("h200x2_hostcopy.stdout")))
    results = hostcopy.run(None, None, node, {"tries": 1})
    assert sorted(r.check_id for r in results) == [
        "bench.d2h.gpu0",
        "bench.d2h.gpu1",
        "bench.h2d.gpu0",
        "bench.h2d.gpu1",
        "bench.pcie_link.gpu0",
        "bench.pcie_link.gpu1",
    ]
    copies = [r for r in results if not r.check_id.startswith("bench.pcie_link")]
    assert all(r.status == Status.PASS for r in copies)
    # This capture predates the under-load reading: the link rows say so instead of guessing.
    links = [r for r in results if r.check_id.startswith("bench.pcie_link")]
    assert all(r.status == Status.SKIP and "not read" in r.reason for r in links)
    call = node.runner.calls[0]
    assert call["argv"][1:3] == ["-I", "-u"] and call["argv"][6] == "verify.bench.torch_hostcopy"
    assert call["cwd"] == "/" and "PYTHONPATH" not in call["env"]


def test_pcie_link_under_load_settles_the_idle_warning():
    gpu = dict(captured()["gpus"][0])
    gpu["pcie_under_load"] = {"gen_current": 5, "width_current": 16}
    assert hostcopy.judge_link_under_load(gpu).status == Status.PASS
    gpu["pcie_under_load"] = {"gen_current": 3, "width_current": 16}
    slow = hostcopy.judge_link_under_load(gpu)
    assert slow.status == Status.FAIL and "00000000:00:06.0" in slow.reason and "Gen3 x16" in slow.reason
    gpu["pcie_under_load"] = {"gen_current": 5, "width_current": 8}
    assert hostcopy.judge_link_under_load(gpu).status == Status.FAIL
    gpu["pcie_under_load"] = {"error": "NVML unavailable: no module named pynvml"}
    assert hostcopy.judge_link_under_load(gpu).status == Status.SKIP


def test_engine_that_cannot_run_is_skip_and_crash_is_error(monkeypatch):
    monkeypatch.setattr(hostcopy, "module_available", lambda name: True)
    skipped = hostcopy.run(
        None, None, scripted_node(lambda a: output(a, stderr="torch sees no CUDA device", returncode=3)), {"tries": 1}
    )
    assert skipped[0].status == Status.SKIP and "no CUDA device" in skipped[0].reason
    crashed = hostcopy.run(
        None, None, scripted_node(lambda a: output(a, stderr="Segmentation fault", returncode=139)), {"tries": 1}
    )
    assert crashed[0].status == Status.ERROR and "Segmentation fault" in crashed[0].reason


def test_result_marker_round_trip():
    payload = {"gpus": [], "engine": "torch"}
    assert read_result("noise\n" + RESULT_MARKER + json.dumps(payload) + "\nmore") == payload
    assert read_result("no marker at all") is None
