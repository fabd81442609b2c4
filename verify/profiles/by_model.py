"""A hardware profile for any node whose GPUs are one model of the GPU model table, whatever their count.

`verify_profile: auto` used to know only five exact model-and-count profiles; any other node had floors
derived from its link peaks, where BF16 matmul passed at 0.5 x the max-clock peak: a 1x H100 at 67% of
a healthy one PASSed. Here each GPU engine and host-copy floor is a fraction of the MEASURED healthy figure
for the model where one of our runs measured it (docs/measurements.md, named on each threshold), else a
lower fraction of the datasheet's figure (verify/judging/gpu_models.py). Each threshold's source says which.

Why 0.90 (warn 0.95) of the lowest healthy figure: the run-to-run noise of the healthy runs below. The widest
is BF16 matmul on H200, 777.1 to 808 TFLOPS over three runs on two machines (3.8%); every other figure moved
less (H100 matmul 789.4 to 798.3: 1.1%; HBM 0.1% on H100, 0.7% on H200; host copies at most 0.5%; GPU-to-GPU
copies 1.6%). 0.9 of the LOWEST healthy figure puts the floor 10% under every healthy run seen, more than twice
the widest noise, while a GPU at 75% of a healthy one is 15 points under the floor: FAIL.
Unmeasured models get lower fractions of the datasheet: a healthy run reaches 0.886-0.90 of the datasheet's
memory bandwidth and 0.785-0.80 of its dense BF16 (H100: 3017 / 3350, 789.4 / 989.4; H200: 4251 / 4800,
777.1 / 989.4), but power-capped PCIe cards and GDDR parts are not measured, and a false FAIL drains a good
node: 0.75 x memory (0.83-0.85 of a healthy H100 / H200) and 0.55 x dense BF16 (0.69-0.70 of one).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from verify.judging import gpu_models

FLOOR_OF_HEALTHY = 0.90
WARN_OF_HEALTHY = 0.95
# threshold key -> (floor, warn) as fractions of the datasheet figure, and the engine figure it bounds
DATASHEET_FRACTIONS = {
    "gpu_hbm_gbps": (0.75, 0.80, "hbm"),
    "gpu_matmul_bf16_tflops": (0.55, 0.60, "matmul"),
}
_MEASUREMENTS = "docs/measurements.md, table '2026-11-23: `tunefleet verify --local` with no argument'"


@dataclass(frozen=True)
class Healthy:
    """What healthy GPUs of a model gave for one threshold key in our runs: every figure, and where."""

    key: str
    figures: tuple  # each healthy figure seen, as written where `seen` says
    seen: str  # the runs: machine, command, each figure
    gpu_count: Optional[int] = None  # pair copies depend on how the GPUs are linked: only for this count

    @property
    def value(self) -> float:
        """The lowest healthy figure: the floors are fractions of it."""
        return min(self.figures)

    @property
    def spread(self) -> float:
        """Run-to-run noise: how far the lowest healthy figure is under the highest (0.038 = 3.8%)."""
        return 1 - min(self.figures) / max(self.figures)


# Every figure from docs/measurements.md (the row named); the value is the lowest of them.
MEASURED = {
    "h100-sxm": (
        Healthy("gpu_hbm_gbps", (3020.8, 3021.3, 3017.0),
                f"1x H100 (NVIDIA H100 80GB HBM3): HBM copy 3020.8 GB/s (row 'quick set with the GPU engines', "
                f"tests/device/gpu_engines.sh), engine 3021.3 and plain torch loop 3017.0 (row 'engine against a "
                f"plain torch loop in the same run', benchmarks/gpu_engines_side_by_side.py) in {_MEASUREMENTS}"),
        Healthy("gpu_matmul_bf16_tflops", (794.7, 789.4, 794.5, 798.3),
                f"1x H100: BF16 matmul 794.7 TFLOPS (row 'quick set with the GPU engines'), engine 789.4 and plain "
                f"loop 794.5 (row 'engine against a plain torch loop in the same run') in {_MEASUREMENTS}; "
                "798.3 in tests/fixtures/bench/gpu_engine_h100x1.stdout"),
        Healthy("h2d_gbps", (55.2,), f"1x H100: pinned H2D 55.2 GB/s on PCIe Gen5 x16 (row 'quick set, no argument', "
                                  f"tests/device/verify_main_job.sh) in {_MEASUREMENTS}"),
        Healthy("d2h_gbps", (55.1,), f"1x H100: pinned D2H 55.1 GB/s on PCIe Gen5 x16 (row 'quick set, no argument', "
                                  f"tests/device/verify_main_job.sh) in {_MEASUREMENTS}"),
    ),
    "h200-sxm": (
        Healthy("gpu_hbm_gbps", (4252, 4251, 4275.0, 4278.7, 4259, 4267),
                f"2x H200: HBM copy 4252 / 4251 GB/s (row 'final round ... now with the GPU engines'), 4275.0 / "
                f"4278.7 (row 'GPU engines, first version') in {_MEASUREMENTS}; 4259 / 4267 (issue 19, "
                "verify/profiles/h200-x2-nvlink.json)"),
        Healthy("gpu_matmul_bf16_tflops", (792.6, 781.8, 792.5, 777.1, 808, 805),
                f"2x H200: BF16 matmul 792.6 / 781.8 TFLOPS (row 'final round ... now with the GPU engines'), plain "
                f"loop 792.5 / 777.1 (row 'GPU engines, first version') in {_MEASUREMENTS}; 808 / 805 (issue 19)"),
        Healthy("h2d_gbps", (55.25, 55.44, 55.5, 55.2),
                "2x H200: pinned H2D 55.25 to 55.44 GB/s per GPU on PCIe Gen5 x16 (docs/measurements.md, GPU machine "
                "table, row 'pinned host-device copies, 1 GiB'); 55.5 / 55.2 in the final round"),
        Healthy("d2h_gbps", (55.21, 55.32, 55.3),
                "2x H200: pinned D2H 55.21 to 55.32 GB/s per GPU (docs/measurements.md, GPU machine table, row "
                "'pinned host-device copies, 1 GiB'); 55.3 / 55.3 in the final round"),
        Healthy("gpu_copy_gbps", (388.6, 388.8, 388.9, 389.0, 394.4, 394.8),
                f"2x H200 joined by NV18: GPU-to-GPU one way 388.6 / 388.8 GB/s (row 'final round ... now with the "
                f"GPU engines'), 388.9 / 389.0 (row 'GPU engines, first version') in {_MEASUREMENTS}; 394.4 / "
                "394.8 (issue 19)", gpu_count=2),
        Healthy("gpu_copy_bidir_gbps", (383.0, 383.2, 382.8),
                f"2x H200 joined by NV18: each direction both ways at once 383.0 / 383.2 GB/s (row 'final round ... "
                f"now with the GPU engines'), 383.0 / 382.8 (row 'GPU engines, first version') in {_MEASUREMENTS}",
                gpu_count=2),
    ),
}
# tests/unit/test_gpu_models.py holds the floor's 10% gap to at least twice each measured spread.
NOISE = ("run-to-run noise of the healthy runs at most 3.8% (H200 matmul 777.1-808 TFLOPS): the floor sits 10% "
         "under the lowest healthy run, and a GPU at 75% of a healthy one FAILs (verify/profiles/by_model.py)")


def node_model(gpus: list) -> Optional[gpu_models.GpuModel]:
    """The one model every GPU of the inventory is (name and memory.total as nvidia-smi / NVML give them)."""
    found = set()
    for gpu in gpus:
        memory = gpu.get("memory_mib")
        model = gpu_models.match(str(gpu.get("name", "")), memory if isinstance(memory, int) else None)
        if model is None:
            return None
        found.add(model)
    return found.pop() if len(found) == 1 else None


def _measured(model: gpu_models.GpuModel, gpu_count: int) -> dict:
    thresholds = {}
    for healthy in MEASURED.get(model.key, ()):
        if healthy.gpu_count not in (None, gpu_count):
            continue
        thresholds[healthy.key] = {
            "min": round(FLOOR_OF_HEALTHY * healthy.value, 1),
            "warn": round(WARN_OF_HEALTHY * healthy.value, 1),
            "source": f"measured: {FLOOR_OF_HEALTHY:g}x / {WARN_OF_HEALTHY:g}x of {healthy.value:g}, the lowest "
                      f"healthy figure: {healthy.seen}; {NOISE}",
        }
    return thresholds


def _datasheet(model: gpu_models.GpuModel) -> dict:
    thresholds = {}
    for key, (floor, warn, kind) in DATASHEET_FRACTIONS.items():
        peak = gpu_models.datasheet_peak(kind, model)
        thresholds[key] = {
            "min": round(floor * peak.gbps, 1), "warn": round(warn * peak.gbps, 1),
            "source": f"datasheet: {floor:g}x / {warn:g}x of {peak.source}: no healthy run of this model measured "
                      "(verify/profiles/by_model.py says why these fractions)",
        }
    return thresholds


def _nvlink(model: gpu_models.GpuModel, gpu_count: int) -> dict:
    """Links a GPU of this model must show, on a node of several (one GPU alone may have none active)."""
    if gpu_count < 2 or model.nvlink_optional or not model.nvlink_links:
        return {}
    # nvidia-smi prints the signalling rate (26.562 on NVLink 4), above the datasheet's 25: just under it
    rate = model.nvlink_smi_gbps_per_link
    speed = int(rate * 10) / 10 if rate else model.nvlink_gbps_per_link
    said = f"nvidia-smi prints {rate:g} GB/s per link on this model" if rate else \
        f"the datasheet's {model.nvlink_gbps_per_link:g} GB/s per link (nvidia-smi prints a little more)"
    return {
        "nvlink_links_per_gpu": {"min": model.nvlink_links,
                                 "source": f"datasheet: {model.nvlink_links} NVLink links per {model.key} GPU "
                                           f"({model.source})"},
        "nvlink_link_gbps": {"min": speed, "source": f"{said} ({model.source})"},
    }


def model_profile(model: gpu_models.GpuModel, gpu_count: int, names: tuple = ()) -> dict:
    """The profile of `gpu_count` GPUs of `model` (not yet validated: verify.profiles does that)."""
    measured = _measured(model, gpu_count)
    thresholds = {**_datasheet(model), **measured, **_nvlink(model, gpu_count)}
    measured_keys = sorted(measured)
    if measured_keys:
        basis = f"floors {FLOOR_OF_HEALTHY:g}x the measured healthy {model.key} ({', '.join(measured_keys)})"
        rest = sorted(k for k in DATASHEET_FRACTIONS if k not in measured)
        if rest:
            basis += f", the datasheet for {', '.join(rest)}"
    else:
        basis = f"floors from the {model.key} datasheet (no healthy run of this model measured)"
    name = names[0] if names else model.names[0]
    return {
        "name": f"{model.key}-{gpu_count}x-model",
        "description": f"{gpu_count}x {name}, matched by model ({model.key}) for any GPU count: {basis}",
        "floor_basis": "measured" if measured_keys else "datasheet",
        "gpu_count": gpu_count,
        # Unknown from the model alone: None lets the all-reduce bound allow NVLS, and no FAIL for its absence.
        "nvls_expected": None,
        "match": {"gpu_model": model.key, "gpu_count": gpu_count},
        "sources": {
            "gpu_count": "the GPUs auto saw on this node: a model profile expects no other count (name a "
                         "profile, or set verify_thresholds.gpu_count, to expect more)",
            "nvls_expected": "not known from the GPU model (NVLS needs an NVSwitch): not required, not refused",
        },
        "thresholds": thresholds,
        "vars": {},
        "auto_how": basis,
    }


def merged(shipped: dict, by_model: dict) -> dict:
    """A shipped exact profile, with the model's floors for the keys it does not set (the shipped ones win)."""
    thresholds = {**by_model["thresholds"], **shipped["thresholds"]}
    added = sorted(set(thresholds) - set(shipped["thresholds"]))
    model = by_model["match"]["gpu_model"]
    how = f"shipped profile {shipped['name']}" + (
        f"; {', '.join(added)} from model {model} ({by_model['floor_basis']})" if added else "")
    return {**shipped, "thresholds": thresholds, "auto_how": how}
