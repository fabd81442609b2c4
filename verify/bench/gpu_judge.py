"""Judging the GPU engine's figures (verify.bench.gpu_engine): pure functions of its JSON payload.

Each figure is judged three ways, and the worst verdict wins:
- against a floor: the profile's (or verify_thresholds'), else derived from the GPU's physical peak
  (named "derived" in the report); above that peak is ERROR (verify.bench.common.judged);
- against the node's own median of its peers (the same figure on the other GPUs or pairs): more than
  `spread_pct` below it FAILs even above the floor: one slow NVLink pair or HBM stack hides inside a
  floor but not next to seven healthy twins;
- against the NVML samples taken while it ran: a HW slowdown, thermal or power-brake event FAILs,
  naming the GPU (verify.bench.gpu_clocks).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Optional

from verify.bench import gpu_clocks
from verify.bench.common import Threshold, judged, result
from verify.judging import peaks
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
    """One figure to judge: what it is, its value, the GPU(s) it names, its peak and NVML windows."""

    kind: str  # hbm | matmul | copy | copy_bidir
    check_id: str
    label: str  # "GPU 3" or "GPU 3 to GPU 5"
    gpus: tuple
    value: float
    peak: Optional[peaks.Peak]
    windows: dict  # GPU index -> NVML summary
    raw: dict


def gpu_peaks(gpu: dict) -> dict:
    """{"hbm": Peak, "matmul": Peak} of one GPU from the engine's static facts (NVML, torch)."""
    nvml = gpu.get("nvml") or {}
    return {"hbm": peaks.hbm_peak(nvml.get("bus_width_bits"), nvml.get("max_mem_mhz")),
            "matmul": peaks.matmul_peak(gpu.get("capability"), gpu.get("sm_count"), nvml.get("max_sm_mhz"))}


def figures(payload: dict, nvlink: Optional[dict] = None, pcie: Optional[peaks.Peak] = None) -> tuple:
    """(figures, error rows) from the engine's payload. `nvlink`: GPU index -> NVLink GB/s per direction
    (verify.facts.hardware), `pcie`: the GPUs' PCIe peak, for the pairs' bound."""
    nvlink = nvlink or {}
    facts = {g["index"]: g for g in payload.get("gpus", [])}
    found, errors = [], []
    for row in payload.get("per_gpu", []):
        index = row["index"]
        bound = gpu_peaks(facts.get(index, {}))
        for kind, key, unit_key in (("hbm", "hbm", "gbps"), ("matmul", "matmul", "tflops")):
            item = row.get(key) or {}
            found.append(Figure(kind, f"bench.gpu_{kind}.gpu{index}", f"GPU {index}", (index,),
                                item.get(unit_key), bound[kind], {index: item.get("nvml")}, item))
    for index, error in (payload.get("per_gpu_errors") or {}).items():
        errors.append(result(f"bench.gpu.gpu{index}", Status.ERROR, f"GPU {index}: the engine failed: {error}"))
    for row in payload.get("pairs", []):
        src, dst = row["src"], row["dst"]
        kind = "copy" if row.get("mode") == "oneway" else "copy_bidir"
        bound = peaks.pair_copy_peak(nvlink.get(src, 0.0), nvlink.get(dst, 0.0), pcie)
        windows = {src: (row.get("nvml") or {}).get("src"), dst: (row.get("nvml") or {}).get("dst")}
        found.append(Figure(kind, f"bench.gpu_{kind}.gpu{src}_to_gpu{dst}", f"GPU {src} to GPU {dst}", (src, dst),
                            row.get("gbps"), bound, windows, row))
    for pair, error in (payload.get("pair_errors") or {}).items():
        errors.append(result(f"bench.gpu_copy.pair{pair}", Status.ERROR, f"GPUs {pair}: copy failed: {error}"))
    return found, errors


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


def peer_median(item: Figure, every: list) -> Optional[float]:
    """The median of the same figure on the node's other GPUs or pairs (None with no peer)."""
    values = [f.value for f in every if f.kind == item.kind and f.check_id != item.check_id
              and isinstance(f.value, (int, float)) and f.value == f.value]
    return statistics.median(values) if values else None


def judge(item: Figure, every: list, resolved: Optional[Threshold], spread_pct: float = DEFAULT_SPREAD_PCT,
          forbidden=gpu_clocks.SLOWDOWN) -> CheckResult:
    unit = UNITS[item.kind]
    floor, how = floor_for(item.kind, item.peak, resolved)
    clocks = "; ".join(f"GPU {i}: {gpu_clocks.describe(w)}" for i, w in item.windows.items()) \
        if len(item.windows) > 1 else gpu_clocks.describe(next(iter(item.windows.values()), None))
    details = {"floor_source": how, "unit": unit, "nvml": {str(i): w for i, w in item.windows.items()},
               "raw": {k: v for k, v in item.raw.items() if k != "nvml"}}
    if item.peak is not None:
        details["physical_peak"] = item.peak.to_dict()
    value = item.value if item.value is not None else float("nan")
    reason = f"{item.label} {LABELS[item.kind]} {value:.1f} {unit}"
    if floor is None:
        floor = Threshold(limit=1e-9, source=how)  # only the broken/peak rule applies
    details["threshold"] = floor.to_dict()
    verdict = judged(item.check_id, floor, value, reason, floor.describe() + f" {unit}",
                     None if item.value is None else round(item.value, 2), REMEDIATION[item.kind], details,
                     f" ({how}); {clocks}", peak=item.peak.gbps if item.peak else None,
                     peak_source=item.peak.source if item.peak else "")
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
