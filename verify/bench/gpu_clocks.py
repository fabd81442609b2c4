"""Clock event (throttle) reasons and NVML samples taken while a GPU benchmark runs: the one home
for decoding NVML's reason bitmask and for what counts as a slowdown under load.

NVML (nvmlDeviceGetCurrentClocksEventReasons) and `nvidia-smi --query-gpu=clocks_event_reasons.active`
give the same bitmask ("0x0000000000000001" = idle on the 1x H100 capture in
tests/fixtures/node/health/h100x1). The named booleans the health checks read
(verify/checks/health_gpu.py) are the same bits one by one.
"""

from __future__ import annotations

import math
import statistics
from typing import Iterable, Optional

from verify.judging import clock_reasons

# The bits and what they mean live in verify.judging.clock_reasons (NVIDIA's NVML reference cited there).
# A slowdown the hardware forced (too hot, power brake asserted by the board or the BMC, HW slowdown):
# FAIL whenever it shows during a benchmark. health_gpu.py FAILs on the same four at rest.
SLOWDOWN = clock_reasons.PROBLEM
BENIGN = clock_reasons.BENIGN
REASON_BITS = clock_reasons.REASON_BITS


# Bounds on a reading before it is used (NVML's own ranges, with room): a value outside is no reading.
READING_MAX = {"sm_mhz": 100_000, "mem_mhz": 100_000, "temp_c": 1_000, "power_w": 100_000}
MASK_MAX = (1 << 64) - 1  # NVML's reasons are an unsigned long long
MASK_TEXT_MAX = 24  # "0x" and 16 hex digits, with room for spaces


def decode(mask) -> list:
    """Reason bitmask (int, or nvidia-smi's "0x..." text) -> names of the bits set; unknown bits as hex.
    ValueError naming the value when it is not a 64-bit mask (the text is bounded before int())."""
    if isinstance(mask, str):
        text = mask.strip()
        if len(text) > MASK_TEXT_MAX:
            raise ValueError(f"clock event reasons {text[:MASK_TEXT_MAX]!r}... is not a bitmask")
        try:
            mask = int(text, 16) if text.lower().startswith("0x") else int(text)
        except ValueError:
            raise ValueError(f"clock event reasons {text!r} is not a bitmask") from None
    if isinstance(mask, bool) or not isinstance(mask, int) or not 0 <= mask <= MASK_MAX:
        raise ValueError(f"clock event reasons {str(mask)[:40]!r} is not a bitmask")
    names = [name for bit, name in REASON_BITS if mask & bit]
    known = 0
    for bit, _ in REASON_BITS:
        known |= bit
    if mask & ~known:
        names.append(f"unknown_0x{mask & ~known:x}")
    return names


def _in_range(sample: dict, key: str, bound: str = "") -> Optional[float]:
    """sample[key] as a finite float within READING_MAX[bound or key], else None."""
    value = sample.get(key)
    key = bound or key
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, int) and not 0 <= value <= READING_MAX[key]:  # before float(): a huge int overflows
        return None
    value = float(value)
    return value if math.isfinite(value) and 0 <= value <= READING_MAX[key] else None


def summarise(samples: Iterable[dict]) -> dict:
    """NVML samples of one GPU over one benchmark -> what the report shows next to the figure.

    A sample is {"t": s, "sm_mhz", "mem_mhz", "temp_c", "power_w", "reasons": bitmask}; any reading
    may be missing (None). Reasons are the union of every sample: one HW slowdown sample is enough.
    Total: a sample that is not an object, a reading that is not a finite number in its range, or a
    reasons value that is not a 64-bit mask is left out and counted in "unreadable" (never a figure).
    """
    samples = [] if isinstance(samples, (str, bytes, dict)) or not isinstance(samples, Iterable) else list(samples)
    readable = [s for s in samples if isinstance(s, dict)]
    out: dict = {"samples": len(samples)}
    unreadable = len(samples) - len(readable)
    for key in READING_MAX:
        values = [_in_range(s, key) for s in readable]
        unreadable += sum(1 for s, v in zip(readable, values) if v is None and s.get(key) is not None)
        values = [v for v in values if v is not None]
        if values:
            out[key] = {"min": min(values), "median": statistics.median(values), "max": max(values)}
    seen: list = []
    for sample in readable:
        if sample.get("reasons") is None:
            continue
        try:
            names = decode(sample["reasons"])
        except ValueError:
            unreadable += 1
            continue
        for name in names:
            if name not in seen:
                seen.append(name)
    out["reasons"] = seen
    if unreadable:
        out["unreadable"] = unreadable
    return out


def describe(window: object) -> str:
    """'SM 1980 MHz, mem 3201 MHz, 52 C, 627 W, reasons: none' for the report line. Total: the window comes from
    the engine's payload, so a reading that is not {min, median, max} of finite numbers in its range is said as
    unreadable, never formatted (a text median raised), and reasons that are not names are left out."""
    if not isinstance(window, dict) or not window.get("samples"):
        return "no NVML samples"
    parts = []
    for key, label, unit in (("sm_mhz", "SM", " MHz"), ("mem_mhz", "mem", " MHz"), ("temp_c", "", " C"),
                             ("power_w", "", " W")):
        if not window.get(key):
            continue
        reading = window[key] if isinstance(window[key], dict) else {}
        low, mid, high = (_in_range(reading, field, key) for field in ("min", "median", "max"))
        if low is None or mid is None or high is None:
            parts.append(f"{label or key} unreadable")
            continue
        text = f"{mid:.0f}{unit}"
        if key == "sm_mhz" and low < mid:
            text = f"{low:.0f}-{high:.0f}{unit}"
        if key in ("temp_c", "power_w"):
            text = f"{high:.0f}{unit} max"
        parts.append(f"{label} {text}".strip())
    reasons = window.get("reasons")
    reasons = [str(r)[:40] for r in reasons if isinstance(r, str) and r != "gpu_idle"] \
        if isinstance(reasons, list) else []
    parts.append("reasons: " + (", ".join(reasons) if reasons else "none"))
    return ", ".join(parts)


def slowdowns(window: Optional[dict], forbidden: Iterable[str] = SLOWDOWN) -> list:
    """The forbidden reasons seen in a window (the FAIL list), in REASON_BITS order."""
    seen = set((window or {}).get("reasons") or [])
    return [name for _, name in REASON_BITS if name in seen and name in set(forbidden)]
