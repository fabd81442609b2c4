"""Judging the GPU engine's figures (verify.bench.gpu_engine): pure functions of its JSON payload.

Every figure first meets its physical bound, floor or no floor (issue 27): the peak NVML's facts give
(bus width x memory clock, SMs x max SM clock, the pair's NVLinks or PCIe), else the GPU model table's
datasheet figure x a margin (verify.judging.gpu_models: boost clocks run above the nominal), else the
fastest GPU of that table. Not a number, infinite, negative, zero or above the bound is ERROR
"measurement broken", never PASS, "recorded only" included. Then it is judged three ways, and the worst
verdict wins:
- against a floor: the profile's (or verify_thresholds'), else derived from the GPU's physical peak
  (named "derived" in the report);
- against the node's own median of its peers (the same figure on the other GPUs or pairs): more than
  `spread_pct` below it FAILs even above the floor: one slow NVLink pair or HBM stack hides inside a
  floor but not next to seven healthy twins;
- against the NVML samples taken while it ran: a HW slowdown, thermal or power-brake event FAILs,
  naming the GPU (verify.bench.gpu_clocks).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Optional

from verify.bench import gpu_clocks
from verify.bench.common import Threshold, judged, result
from verify.bounded_load import finite_number
from verify.judging import gpu_models, peaks, verdicts
from verify.judging.thresholds import broken_measurement
from verify.result import CheckResult, Status

# Ratios of the physical peak used as floors when no profile gives one (low on purpose: the peer
# median is what finds a sick GPU; these catch a node whose GPUs are all wrong).
# Measured on 2x H200 (issue 19): copy 4259-4267 GB/s read+write = 0.87 of 4915 GB/s HBM; BF16
# 805-808 TFLOPS = 0.75 of 1070 (4096 x 132 SMs x 1980 MHz); GPU-to-GPU 394.4 GB/s = 0.82 of NV18.
DERIVED = {
    "hbm": Threshold(limit=0.70, warn=0.80, source="derived: 0.70 x HBM peak (2x H200 measured 0.87, issue 19)"),
    "matmul": Threshold(limit=0.50, warn=0.60, source="derived: 0.50 x dense BF16 peak at max SM clock "
                                                      "(2x H200 measured 0.75, issue 19; power-capped GPUs run lower)"),
    "copy": Threshold(limit=0.70, warn=0.75, source="derived: 0.70 x the pair's link peak per direction "
                                                    "(2x H200 NV18 measured 0.82, issue 19)"),
    "copy_bidir": Threshold(limit=0.60, warn=0.70, source="derived: 0.60 x the pair's link peak per direction, "
                                                          "both ways at once (no reference measurement yet)"),
}
KEYS = {"hbm": "gpu_hbm_gbps", "matmul": "gpu_matmul_bf16_tflops", "copy": "gpu_copy_gbps",
        "copy_bidir": "gpu_copy_bidir_gbps"}
UNITS = {"hbm": "GB/s", "matmul": "TFLOPS", "copy": "GB/s", "copy_bidir": "GB/s"}
LABELS = {"hbm": "HBM copy (read+write)", "matmul": "BF16 matmul", "copy": "copy", "copy_bidir": "copy both ways"}
DEFAULT_SPREAD_PCT = 10.0
REMEDIATION = {
    "hbm": "compare with the node's other GPUs; check nvidia-smi -q (memory clock, remapped rows) and RMA a GPU "
           "that stays slow",
    "matmul": "check the GPU's clocks and power (nvidia-smi -q -d CLOCK,POWER,PERFORMANCE), other processes on it, "
              "and cooling; RMA a GPU that stays slow",
    "copy": "check the pair's NVLinks (nvidia-smi nvlink --status / -e) and nvidia-smi topo -m; reseat or RMA",
    "copy_bidir": "check the pair's NVLinks (nvidia-smi nvlink --status / -e) and nvidia-smi topo -m; reseat or RMA",
}


@dataclass
class Figure:
    """One figure to judge: what it is, its value, the GPU(s) it names, its peak, its bound and NVML windows."""

    kind: str  # hbm | matmul | copy | copy_bidir
    check_id: str
    label: str  # "GPU 3" or "GPU 3 to GPU 5"
    gpus: tuple
    value: Any  # as the engine wrote it: judge() refuses what is not a real figure
    peak: Optional[peaks.Peak]  # what derived floors are fractions of (NVML, else the datasheet); None: unknown
    windows: dict  # GPU index -> NVML summary
    raw: dict
    bound: Optional[peaks.Peak] = None  # above it the figure is broken; None: the peak, else the fastest GPU's
    identity: Optional[dict] = None  # GPU index -> {index, bus_id, serial, uuid, cuda_ordinal}


def _model(gpu: dict) -> Optional[gpu_models.GpuModel]:
    """The GPU's row of the model table from the engine's facts (torch's name and total memory)."""
    memory = gpu.get("memory_bytes")
    memory_mib = memory // (1 << 20) if isinstance(memory, int) and not isinstance(memory, bool) else None
    return gpu_models.match(str(gpu.get("name", "")), memory_mib)


def gpu_peaks(gpu: dict) -> dict:
    """{"hbm": Peak, "matmul": Peak} of one GPU from the engine's static facts (NVML, torch); None where
    unknown."""
    nvml = gpu.get("nvml") if isinstance(gpu.get("nvml"), dict) else {}
    return {"hbm": peaks.hbm_peak(nvml.get("bus_width_bits"), nvml.get("max_mem_mhz")),
            "matmul": peaks.matmul_peak(gpu.get("capability"), gpu.get("sm_count"), nvml.get("max_sm_mhz"))}


def gpu_bounds(gpu: dict) -> tuple:
    """({kind: peak for derived floors}, {kind: bound}) of one GPU: NVML's peak for both where known, else
    the model table's datasheet figure (the floor's base) and that figure x its margin (the bound), else no
    floor base and the fastest GPU's bound."""
    measured, model = gpu_peaks(gpu), _model(gpu)
    base, bounds = {}, {}
    for kind in ("hbm", "matmul"):
        base[kind] = measured[kind] or (gpu_models.datasheet_peak(kind, model) if model else None)
        bounds[kind] = measured[kind] or gpu_models.bound(kind, model)
    return base, bounds


def pair_bound(src: Optional[dict], dst: Optional[dict]) -> peaks.Peak:
    """One direction of a copy between two GPUs whose links are unknown: the slower model's datasheet
    bound, or the fastest GPU's where either model is unknown."""
    models = [_model(g or {}) for g in (src, dst)]
    if None in models:
        return gpu_models.fastest_bound("copy")
    return min((gpu_models.datasheet_bound("copy", m) for m in models), key=lambda p: p.gbps)


def _rows(payload: dict, key: str) -> list:
    rows = payload.get(key)
    return [row for row in rows if isinstance(row, dict)] if isinstance(rows, list) else []


def _name(index, facts: dict) -> str:
    """'GPU 2 (00000000:08:00.0)': nvidia-smi's index and the bus id a technician finds the GPU by."""
    bus = (facts.get(index) or {}).get("bus_id")
    return f"GPU {index} ({bus})" if bus else f"GPU {index}"


def _identity(index, facts: dict) -> dict:
    gpu = facts.get(index) or {}
    return {k: gpu.get(k) for k in ("index", "bus_id", "serial", "uuid", "cuda_ordinal") if gpu.get(k) is not None}


def figures(payload: dict, nvlink: Optional[dict] = None, pcie: Optional[peaks.Peak] = None) -> tuple:
    """(figures, error rows) from the engine's payload, on any input (a field of the wrong type is skipped).
    `nvlink`: GPU index -> NVLink GB/s per direction (verify.facts.hardware), None where the links could not
    be read; `pcie`: the GPUs' PCIe peak, for the pairs' bound. GPUs are named by the payload's `index`: the
    engine writes NVML's index there (verify.bench.gpu_engine.identities), whatever CUDA's numbering."""
    payload = payload if isinstance(payload, dict) else {}
    facts = {g.get("index"): g for g in _rows(payload, "gpus") if _is_index(g.get("index"))}
    nvlink = nvlink if isinstance(nvlink, dict) or nvlink is None else None
    found, errors = [], []
    for row in _rows(payload, "per_gpu"):
        index = row.get("index")
        if not _is_index(index):
            continue
        base, bounds = gpu_bounds(facts.get(index, {}))
        for kind, key, unit_key in (("hbm", "hbm", "gbps"), ("matmul", "matmul", "tflops")):
            item = row.get(key) if isinstance(row.get(key), dict) else {}
            found.append(Figure(kind, f"bench.gpu_{kind}.gpu{index}", _name(index, facts), (index,),
                                item.get(unit_key), base[kind], {index: item.get("nvml")}, item, bounds[kind],
                                {str(index): _identity(index, facts)}))
    per_gpu_errors = payload.get("per_gpu_errors")
    for index, error in (per_gpu_errors.items() if isinstance(per_gpu_errors, dict) else ()):
        errors.append(result(f"bench.gpu.gpu{index}", Status.ERROR, f"GPU {index}: the engine failed: {error!s:.300}",
                             details={verdicts.ACTION_KEY: verdicts.WATCH}))
    for row in _rows(payload, "pairs"):
        src, dst = row.get("src"), row.get("dst")
        if not (_is_index(src) and _is_index(dst)):
            continue
        kind = "copy" if row.get("mode") == "oneway" else "copy_bidir"
        # Links unread (a parse error, no nvidia-smi) must not make PCIe the bound of an NVLink copy.
        peak = None if nvlink is None else peaks.pair_copy_peak(_gbps(nvlink.get(src)), _gbps(nvlink.get(dst)), pcie)
        nvml = row.get("nvml") if isinstance(row.get("nvml"), dict) else {}
        windows = {src: nvml.get("src"), dst: nvml.get("dst")}
        found.append(Figure(kind, f"bench.gpu_{kind}.gpu{src}_to_gpu{dst}",
                            f"{_name(src, facts)} to {_name(dst, facts)}", (src, dst),
                            row.get("gbps"), peak, windows, row,
                            peak or pair_bound(facts.get(src), facts.get(dst)),
                            {str(src): _identity(src, facts), str(dst): _identity(dst, facts)}))
    pair_errors = payload.get("pair_errors")
    for pair, error in (pair_errors.items() if isinstance(pair_errors, dict) else ()):
        errors.append(result(f"bench.gpu_copy.pair{pair}", Status.ERROR, f"GPUs {pair}: copy failed: {error!s:.300}",
                             details={verdicts.ACTION_KEY: verdicts.WATCH}))
    return found, errors


def _is_index(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 16


def _gbps(value) -> float:
    number = finite_number(value)
    return number if number is not None and number > 0 else 0.0


def floor_for(kind: str, peak: Optional[peaks.Peak], resolved: Optional[Threshold]) -> tuple:
    """(absolute Threshold or None, how it was chosen): the profile's wins, else DERIVED x peak."""
    if resolved is not None:
        return resolved, resolved.source
    if peak is None:
        return None, "no floor: the physical peak is unknown (recorded only)"
    ratio = DERIVED[kind]
    floor = Threshold(limit=ratio.limit * peak.gbps, warn=ratio.warn * peak.gbps if ratio.warn else None,
                      source=f"{ratio.source}; peak {peak.source}")
    return floor, f"derived: {ratio.limit:g} x {peak.gbps:.0f} {UNITS[kind]} ({peak.source})"


def real_figure(value: Any) -> Optional[float]:
    """The value as a float when it could be a measurement (a finite number above zero), else None."""
    number = finite_number(value)
    return number if number is not None and number > 0 else None


def broken(value: Any, bound: Optional[peaks.Peak]) -> Optional[str]:
    """Why the figure cannot be real (verify.judging.thresholds' rule, and zero: a GPU that ran moved
    something), else None."""
    why = broken_measurement(value, bound.gbps if bound else None, bound.source if bound else "")
    if why is None and real_figure(value) is None:
        why = f"measurement broken: {value!r} is zero, impossible for an engine that ran"
    return why


def peer_median(item: Figure, every: list) -> Optional[float]:
    """The median of the same figure on the node's other GPUs or pairs (None with no peer); figures that
    cannot be real take no part."""
    values = [f.value for f in every if f.kind == item.kind and f.check_id != item.check_id
              and real_figure(f.value) is not None and broken(f.value, f.bound or f.peak) is None]
    return statistics.median(values) if values else None


def judge(item: Figure, every: list, resolved: Optional[Threshold], spread_pct: float = DEFAULT_SPREAD_PCT,
          forbidden=gpu_clocks.SLOWDOWN) -> CheckResult:
    unit = UNITS[item.kind]
    bound = item.bound or item.peak or gpu_models.fastest_bound("copy" if "copy" in item.kind else item.kind)
    floor, how = floor_for(item.kind, item.peak, resolved)
    clocks = "; ".join(f"GPU {i}: {gpu_clocks.describe(w)}" for i, w in item.windows.items()) \
        if len(item.windows) > 1 else gpu_clocks.describe(next(iter(item.windows.values()), None))
    details = {"floor_source": how, "unit": unit, "nvml": {str(i): w for i, w in item.windows.items()},
               "raw": {k: v for k, v in item.raw.items() if k != "nvml"}, "physical_peak": bound.to_dict(),
               "gpu_identity": item.identity or {}}
    number = real_figure(item.value)
    shown = f"{number:.1f}" if number is not None else f"{item.value!r:.40}"
    reason = f"{item.label} {LABELS[item.kind]} {shown} {unit}"
    if floor is None:
        floor = Threshold(limit=1e-9, source=how)  # only the broken/bound rule applies
    details["threshold"] = floor.to_dict()
    why = broken(item.value, bound)
    if why:
        return result(item.check_id, Status.ERROR, f"{reason}: {why} ({how})", floor.describe() + f" {unit}",
                      None, "the benchmark's output is not a real measurement: re-run it and read its raw output",
                      details)
    value = number
    verdict = judged(item.check_id, floor, value, reason, floor.describe() + f" {unit}", round(value, 2),
                     REMEDIATION[item.kind], details, f" ({how}); {clocks}", peak=bound.gbps,
                     peak_source=bound.source)
    if verdict.status is Status.ERROR:
        return verdict
    problems = []
    median = peer_median(item, every)
    if median:
        share = value / median
        details["node_median"] = round(median, 2)
        details["vs_node_median"] = round(share, 4)
        if share < 1 - spread_pct / 100:
            problems.append(f"{reason}, node median {median:.0f} ({(1 - share):.0%} below, limit {spread_pct:g}%)")
    for index, window in item.windows.items():
        seen = gpu_clocks.slowdowns(window, forbidden)
        if seen:
            problems.append(f"GPU {index}: {', '.join(seen)} during the {LABELS[item.kind]}")
    if not problems:
        return verdict
    text = "; ".join(problems)
    return result(item.check_id, Status.FAIL, f"{text} [{verdict.reason}]", verdict.expected, verdict.observed,
                  REMEDIATION[item.kind], details)


def one_gpu_skip(count: int) -> list:
    why = f"one GPU on this node ({count} seen): no pair to copy between"
    return [result("bench.gpu_copy", Status.SKIP, why), result("bench.gpu_copy_bidir", Status.SKIP, why)]
