"""Calibration and the margin gate, fitted on labelled validation data. Pure (no numpy).

* Temperature scaling (Guo et al. 2017): p = softmax(z / T) over the label logprobs z, T fitted by
  minimising the negative log-likelihood of the right answers. NLL is convex in beta = 1/T, so a
  golden-section search on beta finds the optimum.
* ECE (Naeini et al. 2015): sum over equal-width confidence bins of |bin| / n * |acc - conf|;
  the bin table is the reliability diagram's data.
* Margin gate: the smallest margin threshold whose answered part (margin >= threshold) reaches a
  target accuracy, i.e. the most coverage at that accuracy; the selective-prediction curve lists
  coverage and accuracy for every candidate threshold.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tpwarden.cluster.decide.labels import normalise, top_two

Example = tuple[Mapping[str, float], str]  # (label logprobs, right label)


def nll(examples: Sequence[Example], temperature: float) -> float:
    """Mean negative log-likelihood of the right labels at `temperature`."""
    total = 0.0
    for logprobs, answer in examples:
        p = normalise(logprobs, temperature)[answer]
        total -= math.log(max(p, 1e-300))
    return total / max(len(examples), 1)


def fit_temperature(
    examples: Sequence[Example], lo: float = 0.05, hi: float = 20.0, iters: int = 100
) -> float:
    """The T that minimises NLL (golden-section search on beta = 1/T in [1/hi, 1/lo])."""
    if not examples:
        raise ValueError("no labelled examples to fit a temperature on")
    a, b = 1.0 / hi, 1.0 / lo
    g = (math.sqrt(5) - 1) / 2
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = nll(examples, 1 / c), nll(examples, 1 / d)
    for _ in range(iters):
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = nll(examples, 1 / c)
        else:
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = nll(examples, 1 / d)
    return 2.0 / (a + b)


@dataclass(frozen=True)
class Bin:
    lo: float
    hi: float
    count: int
    accuracy: float | None
    confidence: float | None

    def to_json(self) -> dict[str, float | int | None]:
        return {
            "lo": self.lo,
            "hi": self.hi,
            "count": self.count,
            "accuracy": self.accuracy,
            "confidence": self.confidence,
        }


def confidence_bins(
    confidences: Sequence[float], correct: Sequence[bool], n_bins: int = 10
) -> list[Bin]:
    """Equal-width bins over [0, 1]; the last bin includes 1.0."""
    groups: list[list[tuple[float, bool]]] = [[] for _ in range(n_bins)]
    for c, ok in zip(confidences, correct, strict=True):
        groups[min(int(c * n_bins), n_bins - 1)].append((c, ok))
    out = []
    for i, g in enumerate(groups):
        n = len(g)
        out.append(
            Bin(
                i / n_bins,
                (i + 1) / n_bins,
                n,
                sum(ok for _, ok in g) / n if n else None,
                sum(c for c, _ in g) / n if n else None,
            )
        )
    return out


def ece(bins: Sequence[Bin]) -> float:
    n = sum(b.count for b in bins)
    if not n:
        return 0.0
    return sum(
        b.count / n * abs((b.accuracy or 0.0) - (b.confidence or 0.0)) for b in bins if b.count
    )


def brier(examples: Sequence[Example], temperature: float) -> float:
    """Multiclass Brier score (0 best, 2 worst)."""
    total = 0.0
    for logprobs, answer in examples:
        p = normalise(logprobs, temperature)
        total += sum((q - (1.0 if k == answer else 0.0)) ** 2 for k, q in p.items())
    return total / max(len(examples), 1)


@dataclass(frozen=True, kw_only=True)
class CalibrationReport:
    temperature: float
    n: int
    ece_before: float
    ece_after: float
    nll_before: float
    nll_after: float
    brier_before: float
    brier_after: float
    bins_before: list[Bin]
    bins_after: list[Bin]

    def to_json(self) -> dict[str, object]:
        return {
            "temperature": self.temperature,
            "n": self.n,
            "ece_before": self.ece_before,
            "ece_after": self.ece_after,
            "nll_before": self.nll_before,
            "nll_after": self.nll_after,
            "brier_before": self.brier_before,
            "brier_after": self.brier_after,
            "bins_before": [b.to_json() for b in self.bins_before],
            "bins_after": [b.to_json() for b in self.bins_after],
        }


def _conf_correct(examples: Sequence[Example], t: float) -> tuple[list[float], list[bool]]:
    conf, ok = [], []
    for logprobs, answer in examples:
        decision, _ = top_two(p := normalise(logprobs, t))
        conf.append(p[decision])
        ok.append(decision == answer)
    return conf, ok


def calibrate(examples: Sequence[Example], n_bins: int = 10) -> CalibrationReport:
    t = fit_temperature(examples)
    before = confidence_bins(*_conf_correct(examples, 1.0), n_bins=n_bins)
    after = confidence_bins(*_conf_correct(examples, t), n_bins=n_bins)
    return CalibrationReport(
        temperature=t,
        n=len(examples),
        ece_before=ece(before),
        ece_after=ece(after),
        nll_before=nll(examples, 1.0),
        nll_after=nll(examples, t),
        brier_before=brier(examples, 1.0),
        brier_after=brier(examples, t),
        bins_before=before,
        bins_after=after,
    )


# --- selective prediction -------------------------------------------------------------------


@dataclass(frozen=True)
class CurvePoint:
    threshold: float  # answer when margin >= threshold
    coverage: float
    accuracy: float | None  # on the answered part
    answered: int


def selective_curve(margins: Sequence[float], correct: Sequence[bool]) -> list[CurvePoint]:
    """One point per distinct margin (plus 0: answer everything), from full coverage down."""
    n = len(margins)
    pairs = sorted(zip(margins, correct, strict=True), key=lambda t: t[0])
    out = []
    thresholds = sorted({0.0, *margins})
    idx, right_above, count_above = 0, sum(correct), n
    for t in thresholds:
        while idx < n and pairs[idx][0] < t:
            right_above -= pairs[idx][1]
            count_above -= 1
            idx += 1
        out.append(
            CurvePoint(
                t,
                count_above / n if n else 0.0,
                right_above / count_above if count_above else None,
                count_above,
            )
        )
    return out


def choose_gate(
    margins: Sequence[float], correct: Sequence[bool], target_accuracy: float
) -> CurvePoint | None:
    """The lowest threshold (most coverage) whose answered part reaches `target_accuracy`;
    None when no threshold with at least one answered item does."""
    for point in selective_curve(margins, correct):
        if point.accuracy is not None and point.accuracy >= target_accuracy:
            return point
    return None
