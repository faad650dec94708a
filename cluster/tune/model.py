"""Predicted throughput for every draft length k' and level, and the recommendation per load
profile. Pure; docs/tune.md states the model.

    per_stream(k', c) = E(k') / step(k', c)          E: acceptance.tokens_per_step
    aggregate(k', c)  = c * per_stream(k', c)         step: steptime.StepModel

When the level's measured aggregate throughput is known the prediction is anchored on it:
aggregate(k', c) = measured(c) * [E(k')/step(k', c)] / [E(k)/step(k, c)], so at the measured k
the prediction is the measurement and the model only supplies the ratio (a level's streams are
not all decoding all the time: ramp-up, prefills, the tail).

The profile objective is scale-free: sum over levels of weight * aggregate(k', c) /
aggregate(k_ref, c), the weighted mean gain against the current k, so c=32's larger numbers do
not drown c=1.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tpwarden.cluster.tune.acceptance import DraftCounts, Estimate, pooled, tokens_per_step
from tpwarden.cluster.tune.steptime import StepModel, StepPoint, fit_step_model


@dataclass(frozen=True)
class LevelMeasure:
    """One bench level at the measured k: counter deltas, median ITL, measured throughput."""

    concurrency: int
    counts: DraftCounts
    itl_ms: float
    aggregate_tok_s: float | None = None

    def point(self) -> StepPoint:
        return StepPoint(self.counts.k, self.concurrency, self.itl_ms, self.counts.fill)


@dataclass(frozen=True)
class Prediction:
    k: int
    concurrency: int
    tokens_per_step: Estimate
    step_ms: float
    aggregate_tok_s: float
    aggregate_lo: float
    aggregate_hi: float
    measured: bool  # this k at this level was measured
    extrapolated: tuple[str, ...] = ()

    @property
    def per_stream_tok_s(self) -> float:
        return self.aggregate_tok_s / self.concurrency

    def to_json(self) -> dict[str, object]:
        e = self.tokens_per_step
        return {
            "k": self.k,
            "concurrency": self.concurrency,
            "tokens_per_step": e.mean,
            "tokens_per_step_95": [e.lo, e.hi],
            "step_ms": self.step_ms,
            "aggregate_tok_s": self.aggregate_tok_s,
            "aggregate_95": [self.aggregate_lo, self.aggregate_hi],
            "per_stream_tok_s": self.per_stream_tok_s,
            "measured": self.measured,
            "extrapolated": list(self.extrapolated),
        }


def fit(levels: Sequence[LevelMeasure], history: Sequence[StepPoint] = ()) -> StepModel:
    """The step model from this run's levels and earlier runs' (k, c, ITL) points."""
    return fit_step_model([lv.point() for lv in levels] + list(history))


def _predict_one(lv: LevelMeasure, model: StepModel, k: int, pool: DraftCounts) -> Prediction:
    counts = lv.counts if lv.counts.drafts > 0 else pool
    e = tokens_per_step(counts, k)
    fill = counts.fill
    step = model.step_ms(k, lv.concurrency, fill)
    raw = lv.concurrency * e.mean / (step / 1000.0)
    why = list(e.extrapolated)
    if (s := model.extrapolates(k)) is not None:
        why.append(s)
    if k == 0:
        why.append("k'=0 keeps the drafter's fixed cost in the step (conservative)")
    agg = raw
    if lv.aggregate_tok_s:
        at_k = tokens_per_step(counts, counts.k).mean / model.step_ms(
            counts.k, lv.concurrency, fill
        )
        agg = lv.aggregate_tok_s * (e.mean / step) / at_k
    # relative band: the counters' sampling error and the step model's misfit, in quadrature
    rel = math.hypot(e.se / e.mean, model.rel_rms)
    lo, hi = agg * (1 - 1.96 * rel), agg * (1 + 1.96 * rel)
    measured = k == counts.k and k in model.ks
    return Prediction(k, lv.concurrency, e, step, agg, lo, hi, measured, tuple(why))


def predict(
    levels: Sequence[LevelMeasure], model: StepModel, k_max: int | None = None
) -> list[Prediction]:
    """Every k' in 0..k_max (default: the measured k) at every measured level."""
    if not levels:
        raise ValueError("no measured level")
    pool = pooled([lv.counts for lv in levels])
    top = pool.k if k_max is None else k_max
    return [_predict_one(lv, model, k, pool) for lv in levels for k in range(top + 1)]


def parse_profile(text: str) -> dict[int, float]:
    """`c1:0.2,c8:0.5,c32:0.3` -> {1: 0.2, 8: 0.5, 32: 0.3}, weights normalised to sum 1."""
    out: dict[int, float] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        level, sep, weight = part.partition(":")
        level = level.strip().lower().removeprefix("c")
        try:
            c, w = int(level), float(weight)
        except ValueError:
            raise ValueError(f"{part!r}: want c<level>:<weight>, e.g. c8:0.5") from None
        if not sep or c < 1 or not (w >= 0 and math.isfinite(w)):
            raise ValueError(f"{part!r}: a level >= 1 and a weight >= 0")
        if c in out:
            raise ValueError(f"level c{c} given twice")
        out[c] = w
    total = sum(out.values())
    if not out or total <= 0:
        raise ValueError(f"{text!r}: no level with a positive weight")
    return {c: w / total for c, w in out.items()}


@dataclass(frozen=True)
class Recommendation:
    k: int
    score: float  # weighted mean of aggregate(k) / aggregate(k_ref)
    scores: Mapping[int, tuple[float, float, float]]  # k -> (score, lo, hi)
    k_ref: int
    runner_up: int | None
    distinguishable: bool  # the best's band clears the runner-up's score
    extrapolated: tuple[str, ...] = field(default=())

    def to_json(self) -> dict[str, object]:
        return {
            "k": self.k,
            "score": self.score,
            "k_ref": self.k_ref,
            "runner_up": self.runner_up,
            "distinguishable": self.distinguishable,
            "extrapolated": list(self.extrapolated),
            "scores": {str(k): list(v) for k, v in self.scores.items()},
        }


def recommend(
    predictions: Sequence[Prediction], profile: Mapping[int, float], k_ref: int
) -> Recommendation:
    """The k' that maximises the profile's weighted gain over k_ref. Every profile level must
    have been measured (a level is a load the model has a step time for)."""
    by = {(p.k, p.concurrency): p for p in predictions}
    missing = sorted(c for c in profile if (k_ref, c) not in by)
    if missing:
        raise ValueError(f"profile levels {missing} were not measured")
    ks = sorted({p.k for p in predictions})
    scores: dict[int, tuple[float, float, float]] = {}
    for k in ks:
        s = lo = hi = 0.0
        for c, w in profile.items():
            p, ref = by[(k, c)], by[(k_ref, c)].aggregate_tok_s
            s, lo, hi = (
                s + w * p.aggregate_tok_s / ref,
                lo + w * p.aggregate_lo / ref,
                hi + w * p.aggregate_hi / ref,
            )
        scores[k] = (s, lo, hi)
    order = sorted(ks, key=lambda k: scores[k][0], reverse=True)
    best, runner = order[0], (order[1] if len(order) > 1 else None)
    clear = runner is None or scores[best][1] > scores[runner][0]
    why = sorted({w for c in profile for w in by[(best, c)].extrapolated})
    return Recommendation(best, scores[best][0], scores, k_ref, runner, clear, tuple(why))
