"""Two samples of one figure (a fleet before and after a change): the shift, its interval, its test, and
which nodes moved beyond their noise. Pure maths on lists of floats; standard library only.

The methods, each a textbook one so a reader can check it:

- Shift: the Hodges-Lehmann estimator of a location shift, the median of every difference
  after[j] - before[i] (Hodges and Lehmann, 1963, "Estimates of location based on rank tests", Ann. Math.
  Statist. 34:598-611). One bad node moves it by one pair in n, unlike the difference of means.
- Interval: the distribution-free interval that goes with it (Moses, in Hollander, Wolfe and Chicken,
  "Nonparametric Statistical Methods", 3rd ed. 2014, section 4.3): the k-th smallest and k-th largest of
  the n*m differences, k = floor(n*m/2 - z(1 - alpha/2) * sqrt(n*m*(n+m+1)/12)), the large-sample form.
  The order statistics are found by bisection over the value with the pairs counted by binary search
  (O((n+m) log n) per step, never the n*m list), to SELECT_TOLERANCE of the figure's scale.
- Test: the Mann-Whitney U test (Mann and Whitney, 1947), two-sided, normal approximation with the tie
  correction and a continuity correction (Hollander et al. 2014, section 4.1), valid from MIN_SAMPLES per side.
- Many figures: Holm's step-down correction (Holm, 1979, "A simple sequentially rejective multiple test
  procedure", Scand. J. Statist. 6:65-70), which holds the chance of any false finding among all the
  figures compared at alpha, whatever their dependence.
- Nodes: a node's relative change judged against the noise of a difference of two of its readings,
  sqrt(2) * sigma, sigma from its own readings (1.4826 * MAD / median, the normal-consistent MAD) or, where it
  has none, from the fleet's spread of changes (1.4826 * MAD of every node's relative change, which is the
  noise of a difference already); z = change / noise, p from the normal, Holm over every node-figure. The same
  with the fleet's median change taken off says whether the node moved apart from the fleet or with it.
"""
from __future__ import annotations

import math
from bisect import bisect_left
from dataclasses import dataclass
from itertools import repeat
from operator import sub
from statistics import NormalDist
from typing import Optional, Sequence

from verify.stats.outliers import MEAN_AD_SCALE, median

MIN_SAMPLES = 5  # per side: below it the normal approximation of U is too coarse to call anything
MAD_SCALE = 1.4826  # MAD -> standard deviation for normal data (1 / Phi^-1(3/4))
SELECT_TOLERANCE = 1e-7  # relative to the figure's scale: the interval's ends are exact to this
SQRT2 = math.sqrt(2.0)


@dataclass
class Shift:
    """after - before of one figure across a fleet: Hodges-Lehmann estimate, its interval, the U test."""

    n_before: int
    n_after: int
    median_before: float
    median_after: float
    estimate: Optional[float]  # None: fewer than MIN_SAMPLES on a side
    low: Optional[float]  # None also when the sides are too small for an interval at this level
    high: Optional[float]
    p_value: Optional[float]
    z: Optional[float]
    confidence: float

    def percent(self, value: Optional[float]) -> Optional[float]:
        """A shift as a percentage of the before median (None without one)."""
        if value is None or not self.median_before:
            return None
        return 100.0 * value / abs(self.median_before)


def shift(before: Sequence[float], after: Sequence[float], alpha: float = 0.01) -> Shift:
    """The shift of after against before: estimate, (1 - alpha) interval and two-sided p-value."""
    a, b = sorted(before), sorted(after)
    n, m = len(a), len(b)
    med_a = median(a) if a else math.nan
    med_b = median(b) if b else math.nan
    if n < MIN_SAMPLES or m < MIN_SAMPLES:
        return Shift(n, m, med_a, med_b, None, None, None, None, None, 1 - alpha)
    scale = max(abs(med_a), abs(med_b), a[-1] - a[0], b[-1] - b[0], 1e-300)
    tol = scale * SELECT_TOLERANCE
    total = n * m
    if total % 2:
        estimate = kth_difference(a, b, total // 2 + 1, tol)
    else:
        lower = kth_difference(a, b, total // 2, tol)
        # the next order statistic is the same value when enough differences sit at it (ties, or within tol)
        upper = lower if count_at_most(a, b, lower) > total // 2 else kth_difference(a, b, total // 2 + 1, tol)
        estimate = (lower + upper) / 2
    z_crit = NormalDist().inv_cdf(1 - alpha / 2)
    k = math.floor(total / 2 - z_crit * math.sqrt(total * (n + m + 1) / 12.0))
    low = high = None
    if k >= 1:
        low = kth_difference(a, b, k, tol)
        high = kth_difference(a, b, total + 1 - k, tol)
    z, p = mann_whitney(a, b)
    return Shift(n, m, med_a, med_b, estimate, low, high, p, z, 1 - alpha)


def count_at_most(a: list, b: list, t: float) -> int:
    """#{(i, j): b[j] - a[i] <= t} for sorted a and b: for each b[j], the a[i] >= b[j] - t."""
    return len(a) * len(b) - sum(map(bisect_left, repeat(a, len(b)), map(sub, b, repeat(t, len(b)))))


def kth_difference(a: list, b: list, k: int, tol: float) -> float:
    """The k-th smallest (1-based) of b[j] - a[i], a and b sorted, to within tol: the smallest t with at
    least k differences at or below it, by a safeguarded false position on the count (Illinois-style: the
    count of a large sample is nearly linear near the target, so a few counts find it; every third step
    bisects, so it never takes more steps than bisection would)."""
    low, high = b[0] - a[-1], b[-1] - a[0]
    count_low = count_at_most(a, b, low)
    if count_low >= k:
        return low
    count_high = len(a) * len(b)
    step = 0
    while high - low > tol:
        step += 1
        if step % 3 and count_high > count_low:
            mid = low + (k - 0.5 - count_low) / (count_high - count_low) * (high - low)
            mid = min(max(mid, low + (high - low) * 1e-3), high - (high - low) * 1e-3)
        else:
            mid = (low + high) / 2
        if mid <= low or mid >= high:  # floats exhausted: as exact as the data allow
            break
        count = count_at_most(a, b, mid)
        if count >= k:
            high, count_high = mid, count
        else:
            low, count_low = mid, count
    return high


def mann_whitney(a: Sequence[float], b: Sequence[float]) -> tuple:
    """(z, two-sided p) of the Mann-Whitney U test of b against a: normal approximation, midranks for ties,
    the tie-corrected variance and a continuity correction of 1/2 toward the mean."""
    n, m = len(a), len(b)
    pooled = sorted([(v, 0) for v in a] + [(v, 1) for v in b])
    total = n + m
    rank_sum_b = 0.0
    tie_term = 0.0
    i = 0
    while i < total:
        j = i
        while j + 1 < total and pooled[j + 1][0] == pooled[i][0]:
            j += 1
        midrank = (i + j) / 2 + 1
        size = j - i + 1
        if size > 1:
            tie_term += size ** 3 - size
        rank_sum_b += midrank * sum(side for _, side in pooled[i:j + 1])
        i = j + 1
    u = rank_sum_b - m * (m + 1) / 2
    mean = n * m / 2
    variance = n * m / 12 * ((total + 1) - tie_term / (total * (total - 1)))
    if variance <= 0:  # every value equal: nothing moved
        return 0.0, 1.0
    delta = u - mean
    z = (delta - math.copysign(0.5, delta)) / math.sqrt(variance) if abs(delta) > 0.5 else 0.0
    return z, math.erfc(abs(z) / SQRT2)


def holm(p_values: Sequence[Optional[float]], alpha: float) -> list:
    """Holm's step-down: for each p (None: not tested) whether it is rejected with the family-wise error
    held at alpha across every tested p."""
    tested = sorted((p, index) for index, p in enumerate(p_values) if p is not None)
    rejected = [False] * len(p_values)
    count = len(tested)
    for rank, (p, index) in enumerate(tested):
        if p > alpha / (count - rank):
            break
        rejected[index] = True
    return rejected


def holm_adjusted(p_values: Sequence[Optional[float]]) -> list:
    """Holm-adjusted p-values (the smallest alpha at which each would be rejected), None where not tested."""
    tested = sorted((p, index) for index, p in enumerate(p_values) if p is not None)
    adjusted: list = [None] * len(p_values)
    count = len(tested)
    running = 0.0
    for rank, (p, index) in enumerate(tested):
        running = max(running, min(1.0, (count - rank) * p))
        adjusted[index] = running
    return adjusted


def relative_sd(values: Sequence[float]) -> Optional[float]:
    """Robust relative standard deviation of repeated readings: 1.4826 * MAD / |median| (the mean absolute
    deviation, scaled alike, where more than half are equal); None under 3 readings or with no spread."""
    if len(values) < 3:
        return None
    centre = median(list(values))
    if not centre:
        return None
    deviations = [abs(v - centre) for v in values]
    mad = median(deviations)
    sd = MAD_SCALE * mad if mad > 0 else MEAN_AD_SCALE * sum(deviations) / len(deviations)
    return sd / abs(centre) if sd > 0 else None


@dataclass
class NodeMove:
    host: str
    before: float
    after: float
    change: float  # relative: after / before - 1
    noise: float  # relative standard deviation of a difference of two readings
    noise_source: str  # "own" (its readings) or "fleet" (the fleet's spread of changes)
    z: float
    p_value: float
    fleet_change: float = 0.0  # the median relative change of every node of this figure
    z_apart: float = 0.0  # (change - fleet_change) / noise: moved apart from the fleet, not with it
    p_apart: float = 1.0
    moved: bool = False  # set by judge_moves' Holm pass over every node-figure
    apart: bool = False  # likewise, for the move apart from the fleet's


def fleet_change_sd(changes: Sequence[float]) -> Optional[float]:
    """The spread of the nodes' relative changes (1.4826 * MAD, or the scaled mean absolute deviation):
    the noise of one node's difference where the node has no readings of its own; None with no spread."""
    if len(changes) < 3:
        return None
    centre = median(list(changes))
    deviations = [abs(c - centre) for c in changes]
    mad = median(deviations)
    sd = MAD_SCALE * mad if mad > 0 else MEAN_AD_SCALE * sum(deviations) / len(deviations)
    return sd if sd > 0 else None


def node_changes(before: dict, after: dict, own_sd: Optional[dict] = None) -> list:
    """NodeMove of every host with a positive figure in both (host -> value), not yet judged (moved False).
    own_sd: host -> relative sd of one of its readings (relative_sd), where the host has readings."""
    own_sd = own_sd or {}
    hosts = sorted(h for h in before.keys() & after.keys() if before[h] > 0)
    changes = {h: after[h] / before[h] - 1 for h in hosts}
    fleet_sd = fleet_change_sd(list(changes.values()))
    fleet_change = median(list(changes.values())) if changes else 0.0
    moves = []
    for host in hosts:
        sd_one = own_sd.get(host)
        if sd_one:
            noise, source = SQRT2 * sd_one, "own"
        elif fleet_sd:
            noise, source = fleet_sd, "fleet"
        else:
            continue
        z = changes[host] / noise
        z_apart = (changes[host] - fleet_change) / noise
        moves.append(NodeMove(host, before[host], after[host], changes[host], noise, source, z,
                              math.erfc(abs(z) / SQRT2), fleet_change, z_apart, math.erfc(abs(z_apart) / SQRT2)))
    return moves


def judge_moves(moves: list, alpha: float) -> None:
    """Holm over every node-figure's p: set each NodeMove's moved (beyond its noise) and apart (beyond its
    noise from the fleet's median change: a node that fell while the fleet held, or held while it fell)."""
    for move, rejected in zip(moves, holm([m.p_value for m in moves], alpha)):
        move.moved = rejected
    for move, rejected in zip(moves, holm([m.p_apart for m in moves], alpha)):
        move.apart = rejected
