"""The GPU model table (issue 26 item 6): datasheet figures, the names real nvidia-smi outputs print, the
bounds a GPU engine figure meets when NVML gave none (issue 27 item 1), and the healthy figures the
model profiles' floors are fractions of, held to the runs they cite."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from verify.judging import gpu_models
from verify.profiles import by_model

REPO = Path(__file__).resolve().parents[2]
MEASUREMENTS = (REPO / "docs" / "measurements.md").read_text()
GPU_MACHINE = REPO / "tests" / "fixtures" / "node" / "gpu_machine"
H100_QUERY = REPO / "tests" / "fixtures" / "node" / "health" / "h100x1" / "cmd" / "query-gpu.stdout"


@pytest.mark.parametrize("key, hbm, bf16, tf32, links, tdp", [
    ("h100-sxm", 3350, 989.4, 494.7, 18, 700),  # H100 datasheet 3.35 TB/s; whitepaper 989.4 dense
    ("h200-sxm", 4800, 989.4, 494.7, 18, 700),  # H200 datasheet 4.8 TB/s
    ("a100-sxm4-80gb", 2039, 312, 156, 12, 400),  # A100 datasheet 2,039 GB/s, BF16 312 dense
    ("a100-sxm4-40gb", 1555, 312, 156, 12, 400),
    ("l40s", 864, 362.05, 183, 0, 350),
])
def test_datasheet_figures(key, hbm, bf16, tf32, links, tdp):
    model = next(m for m in gpu_models.MODELS if m.key == key)
    assert (model.hbm_gbps, model.bf16_dense_tflops, model.tf32_dense_tflops, model.nvlink_links, model.tdp_w) == \
        (hbm, bf16, tf32, links, tdp)


def test_dense_is_half_the_sparse_figure_and_keys_are_unique():
    keys = [m.key for m in gpu_models.MODELS]
    assert len(keys) == len(set(keys))
    for model in gpu_models.MODELS:
        assert model.tf32_dense_tflops == pytest.approx(model.bf16_dense_tflops / 2, rel=0.02), model.key


def test_the_names_real_nvidia_smi_printed_match_their_model():
    rows = (GPU_MACHINE / "nvidia-smi-query-gpu.csv").read_text().splitlines()[1:]
    h200_names = [line.split(",")[0] for line in rows]
    assert [gpu_models.match(name).key for name in h200_names] == ["h200-sxm", "h200-sxm"]
    name = re.search(r"NVIDIA H100[^,]*", H100_QUERY.read_text()).group(0)
    assert gpu_models.match(name, 81559).key == "h100-sxm"
    assert gpu_models.match("NVIDIA H200 NVL").key == "h200-nvl"  # not the SXM part's shorter name
    assert gpu_models.match("  nvidia  h100 80gb hbm3 ").key == "h100-sxm"
    assert gpu_models.match("NVIDIA GeForce RTX 4090") is None and gpu_models.match("") is None


@pytest.mark.parametrize("kind", gpu_models.BOUND_KINDS)
def test_bounds_sit_above_the_datasheet_and_the_fastest_above_every_model(kind):
    fastest = gpu_models.fastest_bound(kind)
    for model in gpu_models.MODELS:
        bound = gpu_models.datasheet_bound(kind, model)
        assert bound.gbps > gpu_models.datasheet_peak(kind, model).gbps
        assert bound.gbps <= fastest.gbps
    assert gpu_models.bound(kind, None).gbps == fastest.gbps and "GPU unknown" in fastest.source
    with pytest.raises(ValueError):
        gpu_models.datasheet_bound("storage", gpu_models.MODELS[0])


def test_bound_margins_cover_what_nvml_reports_above_the_nominal():
    """NVML's own peaks of the machines we ran on stay under the datasheet bound (a real figure is never
    refused when NVML is unreadable): H200 6144-bit x 3201 MHz HBM, H100 132 SMs at 1980 MHz BF16."""
    from verify.judging import peaks

    h200, h100 = gpu_models.match("NVIDIA H200"), gpu_models.match("NVIDIA H100 80GB HBM3")
    assert peaks.hbm_peak(6144, 3201).gbps < gpu_models.datasheet_bound("hbm", h200).gbps
    assert peaks.matmul_peak([9, 0], 132, 1980).gbps < gpu_models.datasheet_bound("matmul", h100).gbps
    assert gpu_models.datasheet_bound("copy", h200).gbps > 18 * 26.562


def _healthy():
    return [(model, healthy) for model, rows in by_model.MEASURED.items() for healthy in rows]


@pytest.mark.parametrize("model, healthy", _healthy(), ids=lambda v: v if isinstance(v, str) else v.key)
def test_each_healthy_figure_is_one_a_run_recorded(model, healthy):
    """A floor's base is a measured figure: every figure behind it is written in docs/measurements.md, or in
    the shipped 2x H200 profile / the engine fixture it cites (issue 19's plain loop)."""
    assert model in {m.key for m in gpu_models.MODELS}
    cited = MEASUREMENTS + (REPO / "verify" / "profiles" / "h200-x2-nvlink.json").read_text() + \
        f"{798.3275558135754:.1f}"  # tests/fixtures/bench/gpu_engine_h100x1.stdout's matmul
    for figure in healthy.figures:
        assert re.search(rf"(?<![\d.]){re.escape(f'{figure:g}')}(?![\d])", cited), (healthy.key, figure)


@pytest.mark.parametrize("model, healthy", _healthy(), ids=lambda v: v if isinstance(v, str) else v.key)
def test_the_floor_leaves_room_for_the_measured_noise(model, healthy):
    """The floor's gap under the lowest healthy run is at least twice the noise seen between healthy runs,
    and a GPU at 75% of a healthy one is under it."""
    assert 2 * healthy.spread <= 1 - by_model.FLOOR_OF_HEALTHY, (model, healthy.key, healthy.spread)
    assert 0.75 * max(healthy.figures) < by_model.FLOOR_OF_HEALTHY * healthy.value
    worst = max(h.spread for _, h in _healthy())
    assert f"{worst:.1%}" in by_model.NOISE  # the text the reports carry says the widest noise measured
