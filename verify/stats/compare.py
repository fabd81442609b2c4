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
- Nodes: a node's relative change against the noise of a difference of two of its readings: sqrt(2) times
  the relative standard deviation of its own readings (MIN_READINGS or more) or, where it has none, the
  standard deviation of every node's relative change (which is the noise of a difference already), the nodes
  beyond the fleet outlier rule's modified z left out of it. z = change / noise, and (change - the fleet's
  median change) / noise for "apart from the fleet"; p from Student's t with the estimate's degrees of
  freedom (a noise read from 40 nodes or 5 runs is itself uncertain: the normal would call too many), Holm over
  every node-figure.
"""
from __future__ import annotations

import math
from bisect import bisect_left
from dataclasses import dataclass
from itertools import repeat
from operator import sub
from statistics import NormalDist
from typing import Optional, Sequence

from verify.stats.outliers import MODIFIED_Z_LIMIT, median

MIN_SAMPLES = 5  # per side: below it the normal approximation of U is too coarse to call anything
MIN_READINGS = 3  # a node's own noise takes at least this many readings of it
T_AS_NORMAL_DF = 5000  # Student's t with more degrees of freedom than this is the normal, to the digits shown
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
    z_crit = NormalDist().inv_cdf(1 - alpha / 2)
    # Where the answers should lie, for the search to start near them (the counts decide, never the guess): the
    # shift near the difference of the medians, the interval's ends about z standard errors either side of it.
    width = z_crit * _spread(a, b) * math.sqrt(1 / n + 1 / m)
    guess = med_b - med_a
    if total % 2:
        estimate = kth_difference(a, b, total // 2 + 1, tol, (guess - width / 3, guess + width / 3))
    else:
        lower = kth_difference(a, b, total // 2, tol, (guess - width / 3, guess + width / 3))
        # the next order statistic is the same value when enough differences sit at it (ties, or within tol)
        upper = lower if count_at_most(a, b, lower) > total // 2 else kth_difference(a, b, total // 2 + 1, tol)
        estimate = (lower + upper) / 2
    k = math.floor(total / 2 - z_crit * math.sqrt(total * (n + m + 1) / 12.0))
    low = high = None
    if k >= 1:
        low = kth_difference(a, b, k, tol, (estimate - 1.3 * width, estimate - 0.7 * width))
        high = kth_difference(a, b, total + 1 - k, tol, (estimate + 0.7 * width, estimate + 1.3 * width))
    z, p = mann_whitney(a, b)
    return Shift(n, m, med_a, med_b, estimate, low, high, p, z, 1 - alpha)


def count_at_most(a: list, b: list, t: float) -> int:
    """#{(i, j): b[j] - a[i] <= t} for sorted a and b: for each b[j], the a[i] >= b[j] - t."""
    return len(a) * len(b) - sum(map(bisect_left, repeat(a, len(b)), map(sub, b, repeat(t, len(b)))))


def _spread(a: list, b: list) -> float:
    """A rough common standard deviation of two sorted samples (interquartile range / 1.349), for guesses only."""
    def iqr_sd(x: list) -> float:
        return (x[(3 * len(x)) // 4] - x[len(x) // 4]) / 1.349

    return math.sqrt((iqr_sd(a) ** 2 + iqr_sd(b) ** 2) / 2)


def kth_difference(a: list, b: list, k: int, tol: float, hints: Sequence[float] = ()) -> float:
    """The k-th smallest (1-based) of b[j] - a[i], a and b sorted, to within tol: the smallest t with at
    least k differences at or below it, by a safeguarded false position on the count (the count of a large
    sample is nearly linear near the target, so a few counts find it; every third step bisects, so it never
    takes many more steps than bisection would). hints: values likely to bracket it, tried first."""
    low, high = b[0] - a[-1], b[-1] - a[0]
    count_low, count_high = None, len(a) * len(b)
    for hint in hints:  # values near the answer narrow the bracket at one count each
        if low < hint < high:
            count = count_at_most(a, b, hint)
            if count >= k:
                high, count_high = hint, count
            else:
                low, count_low = hint, count
    if count_low is None:
        count_low = count_at_most(a, b, low)
        if count_low >= k:
            return low
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


def sample_sd(values: Sequence[float]) -> float:
    """The sample standard deviation (n - 1), in floats: statistics.stdev's exact fractions cost 70 ms at
    10,000 values, for digits no figure has."""
    centre = math.fsum(values) / len(values)
    return math.sqrt(math.fsum((v - centre) ** 2 for v in values) / (len(values) - 1))


def relative_sd(values: Sequence[float]) -> Optional[tuple]:
    """(relative sample standard deviation, its degrees of freedom) of a node's repeated readings; None under
    MIN_READINGS readings, or with no spread (a quantised figure read alike every time says nothing of noise)."""
    if len(values) < MIN_READINGS:
        return None
    centre = math.fsum(values) / len(values)
    sd = sample_sd(values)
    return (sd / abs(centre), len(values) - 1) if centre and sd > 0 else None


def fleet_change_sd(changes: Sequence[float]) -> Optional[tuple]:
    """(sd, degrees of freedom) of the nodes' relative changes: the noise of one node's difference where it has
    no readings of its own. The nodes that moved far (modified z beyond MODIFIED_Z_LIMIT, the fleet outlier
    rule) are left out first so they do not widen the yardstick they are judged by; None with no spread."""
    if len(changes) < MIN_READINGS:
        return None
    centre = median(list(changes))
    mad = median([abs(c - centre) for c in changes])
    kept = [c for c in changes if not mad or 0.6745 * abs(c - centre) / mad <= MODIFIED_Z_LIMIT]
    if len(kept) < MIN_READINGS:
        return None
    sd = sample_sd(kept)
    return (sd, len(kept) - 1) if sd > 0 else None


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
    z_apart: float = 0.0  # (change - fleet_change) / its noise: moved apart from the fleet, not with it
    p_apart: float = 1.0
    moved: bool = False  # set by judge_moves' Holm pass over every node-figure
    apart: bool = False  # likewise, for the move apart from the fleet's


def node_changes(before: dict, after: dict, own_sd: Optional[dict] = None, alpha: float = 1.0) -> list:
    """NodeMove of every host with a positive figure in both (host -> value), not yet judged (moved False).
    own_sd: host -> relative_sd() of its own readings, where it has them. alpha: p-values above it are kept
    from the normal, a lower bound of Student's t that Holm cannot reject at alpha either (t costs 100x more)."""
    own_sd = own_sd or {}
    hosts = sorted(h for h in before.keys() & after.keys() if before[h] > 0)
    changes = {h: after[h] / before[h] - 1 for h in hosts}
    fleet = fleet_change_sd(list(changes.values()))
    fleet_change = median(list(changes.values())) if changes else 0.0
    # the fleet's median change has its own noise: pi / 2 * sd^2 / n for the median of n normal values
    median_var = math.pi / 2 * fleet[0] ** 2 / len(changes) if fleet else 0.0
    moves = []
    for host in hosts:
        own = own_sd.get(host)
        if own:
            noise, df, source = SQRT2 * own[0], own[1], "own"
        elif fleet:
            noise, df, source = fleet[0], fleet[1], "fleet"
        else:
            continue
        z = changes[host] / noise
        z_apart = (changes[host] - fleet_change) / math.sqrt(noise ** 2 + median_var)
        moves.append(NodeMove(host, before[host], after[host], changes[host], noise, source, z,
                              _t_two_sided(z, df, alpha), fleet_change, z_apart, _t_two_sided(z_apart, df, alpha)))
    return moves


def judge_moves(moves: list, alpha: float) -> None:
    """Holm over every node-figure's p: set each NodeMove's moved (beyond its noise) and apart (beyond its
    noise from the fleet's median change: a node that fell while the fleet held, or held while it fell)."""
    for move, rejected in zip(moves, holm([m.p_value for m in moves], alpha)):
        move.moved = rejected
    for move, rejected in zip(moves, holm([m.p_apart for m in moves], alpha)):
        move.apart = rejected


def _t_two_sided(t: float, df: int, alpha: float = 1.0) -> float:
    """Two-sided p of Student's t with df degrees of freedom: I_x(df/2, 1/2) at x = df / (df + t^2)
    (Abramowitz and Stegun 26.7.1 with 26.5.27); the normal's where that is already above alpha."""
    normal = math.erfc(abs(t) / SQRT2)
    if normal > alpha or df > T_AS_NORMAL_DF:
        return normal
    return _beta_regularised(df / 2, 0.5, df / (df + t * t))


def _beta_regularised(a: float, b: float, x: float) -> float:
    """I_x(a, b) by its continued fraction (modified Lentz; Press et al., Numerical Recipes, 3rd ed., 6.4)."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1) / (a + b + 2):
        return front * _beta_fraction(a, b, x) / a
    return 1.0 - front * _beta_fraction(b, a, 1 - x) / b


def _beta_fraction(a: float, b: float, x: float) -> float:
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                          -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h
