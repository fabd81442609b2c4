"""Thresholds and the rule that a figure which cannot be real is never judged: one home for both,
shared by checks, benchmarks, profiles and the fleet's judges."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

from verify.result import Status


@dataclass
class Threshold:
    """A floor (kind "min") or a ceiling (kind "max") with a warn band on the good side."""

    limit: float
    warn: Optional[float] = None
    kind: str = "min"
    source: str = ""

    def judge(self, observed: float) -> tuple:
        """(Status, one-line reason) for an observed value; a figure that cannot be real is ERROR."""
        broken = broken_measurement(observed)
        if broken:
            return Status.ERROR, broken
        if self.kind == "min":
            if observed < self.limit:
                return Status.FAIL, f"{observed:.4g} is below the floor {self.limit:.4g}"
            if self.warn is not None and observed < self.warn:
                return (
                    Status.WARN,
                    f"{observed:.4g} passes the floor {self.limit:.4g} but is under the warn band {self.warn:.4g}",
                )
            return Status.PASS, f"{observed:.4g} meets the floor {self.limit:.4g}"
        if observed > self.limit:
            return Status.FAIL, f"{observed:.4g} is above the ceiling {self.limit:.4g}"
        if self.warn is not None and observed > self.warn:
            return (
                Status.WARN,
                f"{observed:.4g} is under the ceiling {self.limit:.4g} but above the warn band {self.warn:.4g}",
            )
        return Status.PASS, f"{observed:.4g} is within the ceiling {self.limit:.4g}"

    def describe(self) -> str:
        sign = ">=" if self.kind == "min" else "<="
        return f"{sign} {self.limit:.4g}"

    def to_dict(self) -> dict:
        return {"limit": self.limit, "warn": self.warn, "kind": self.kind, "source": self.source}


def broken_measurement(
    value: Any,
    peak: Optional[float] = None,
    peak_source: str = "",
    floor: Optional[float] = None,
    floor_source: str = "",
) -> Optional[str]:
    """Why a measured figure cannot be real (not a number, NaN, infinite, negative, above the link's
    peak, at or below the physical floor), else None.

    One home for the rule that garbage never PASSes: every judged benchmark figure passes here.
    `floor` is the value a real figure always exceeds: 0 for a rate (a read or copy that moved
    nothing is no measurement), the fastest wire's latency for a latency (verify.judging.peaks).
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"measurement broken: {value!r} is not a number"
    try:
        finite = math.isfinite(value)
    except OverflowError:  # an integer too big for a float
        return f"measurement broken: a number of about {int(value.bit_length() * 0.30103) + 1} digits"
    if not finite:
        return f"measurement broken: {value} is not a finite number"
    if value < 0:
        return f"measurement broken: {value:.4g} is negative"
    if floor is not None and value <= floor:
        where = f" ({floor_source})" if floor_source else ""
        if floor == 0:
            return f"measurement broken: {value:.4g} is zero, nothing was measured{where}"
        return f"measurement broken: {value:.4g} is at or below the physical floor {floor:.4g}{where}"
    if peak is not None and value > peak:
        where = f" ({peak_source})" if peak_source else ""
        return f"measurement broken: {value:.4g} is above the physical peak {peak:.4g}{where}"
    return None
