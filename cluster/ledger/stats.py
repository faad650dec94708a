"""The statistics `ledger why` uses, standard library only (pure).

* `welch`: Welch's t-test on two samples (the canaries' repeats, as log throughput): the
  difference of means, its standard error, Welch-Satterthwaite degrees of freedom, the 95 %
  interval and the two-sided p-value. On logs, exp(difference) is the throughput ratio.
* `t_cdf` / `t_ppf`: Student's t from the regularized incomplete beta function (Lentz's
  continued fraction), inverted by bisection; checked against tabulated quantiles in the tests.
* `change_point`: where a series' mean shifted (the split with the largest Welch t), to date a
  drift that no recorded difference explains.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass


def _betacf(a: float, b: float, x: float) -> float:
    tiny, eps = 1e-300, 3e-16
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < eps:
            break
    return h


def betai(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    lbeta = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
    front = math.exp(lbeta + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with `df` degrees of freedom (inf: the normal)."""
    if math.isinf(df):
        return 0.5 * math.erfc(-t / math.sqrt(2.0))
    tail = 0.5 * betai(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


def t_ppf(p: float, df: float) -> float:
    """The `p` quantile of Student's t (bisection on `t_cdf`; 1e-10 is plenty here)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p={p} is not in (0, 1)")
    lo, hi = -1e3, 1e3
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-10:
            break
    return (lo + hi) / 2.0


@dataclass(frozen=True)
class Welch:
    """`b` against `a`: diff = mean(b) - mean(a), its interval [lo, hi] at `level`, p-value."""

    diff: float
    se: float
    df: float
    lo: float
    hi: float
    p: float
    n_a: int
    n_b: int

    def significant(self) -> bool:
        return self.lo > 0.0 or self.hi < 0.0


def welch(a: Sequence[float], b: Sequence[float], level: float = 0.95) -> Welch | None:
    """Welch's test of `b` against `a`; None with fewer than two values on either side."""
    if len(a) < 2 or len(b) < 2:
        return None
    ma, mb = statistics.fmean(a), statistics.fmean(b)
    va, vb = statistics.variance(a), statistics.variance(b)
    qa, qb = va / len(a), vb / len(b)
    se = math.sqrt(qa + qb)
    diff = mb - ma
    if se == 0.0:  # identical repeats on both sides: exact, no interval to speak of
        return Welch(diff, 0.0, math.inf, diff, diff, 0.0 if diff else 1.0, len(a), len(b))
    denom = (qa * qa / (len(a) - 1) if qa else 0.0) + (qb * qb / (len(b) - 1) if qb else 0.0)
    df = (qa + qb) ** 2 / denom if denom else math.inf
    half = t_ppf(0.5 + level / 2.0, df) * se
    p = 2.0 * (1.0 - t_cdf(abs(diff) / se, df))
    return Welch(diff, se, df, diff - half, diff + half, p, len(a), len(b))


def logs(values: Sequence[float | None]) -> list[float]:
    """Natural logs of the positive values (a missing or zero measurement is left out)."""
    return [math.log(v) for v in values if v is not None and v > 0]


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def sd(values: Sequence[float]) -> float | None:
    return statistics.stdev(values) if len(values) >= 2 else None


def change_point(values: Sequence[float], min_side: int = 2) -> int | None:
    """The index where the later part of `values` begins after the largest mean shift (by
    Welch's t), or None when the series is too short or flat."""
    best, where = 0.0, None
    for i in range(min_side, len(values) - min_side + 1):
        w = welch(values[:i], values[i:])
        if w is None:
            continue
        t = abs(w.diff) / w.se if w.se else (math.inf if w.diff else 0.0)
        if t > best:
            best, where = t, i
    return where
