"""The verify step's duration as a function of draft length and load. Pure.

Model: one decode step verifies, for each of c running streams, its last token plus the
drafter's proposals, n = c * (1 + fill * k) tokens in one forward pass, so

    step_ms(k, c) = a + b * n  (+ d * k, only when runs at two or more k were measured)

a is the step's fixed cost (weights read once, TP all-reduces, scheduling, the drafter's fixed
cost), b the cost of one more verified token, d a per-draft-position cost (a sequential drafter
runs k forward passes). The measured step time is `vllm bench serve`'s median ITL: with
spec decode a stream receives one chunk per verify step, so ITL is the step time (the field
report: ITL p50 185 ms at c=1 = "one TP=4 verify step takes ~185 ms").

Fitted by least squares over every measured (k, c, ITL) point. One run at one k still fits a and
b from its levels (n varies with c); the step time at another k' is then predicted from the
assumption that a draft token costs what another stream's token costs (flagged as extrapolated).
With a single point (one level, one k) nothing separates a from b: `prior_token_share` (default
5%, what the field report's k=7 sweep gives at c=1) says which share of that step is per-token.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

PRIOR_TOKEN_SHARE = 0.05


@dataclass(frozen=True)
class StepPoint:
    k: int
    concurrency: int
    step_ms: float
    fill: float = 1.0

    @property
    def tokens(self) -> float:
        return verified_tokens(self.k, self.concurrency, self.fill)


def verified_tokens(k: int, concurrency: int, fill: float = 1.0) -> float:
    return concurrency * (1.0 + fill * k)


@dataclass(frozen=True)
class StepModel:
    a_ms: float
    b_ms: float
    d_ms: float
    ks: tuple[int, ...]  # the k values the fit saw
    rel_rms: float  # RMS of (measured - fitted) / measured over the points; 0 when exact
    source: str  # "fit", "fit+k" (d fitted) or "prior"
    notes: tuple[str, ...] = ()

    def step_ms(self, k: int, concurrency: int, fill: float = 1.0) -> float:
        return self.a_ms + self.b_ms * verified_tokens(k, concurrency, fill) + self.d_ms * k

    def extrapolates(self, k: int) -> str | None:
        if k in self.ks:
            return None
        return (
            f"step time at k'={k} is extrapolated from k={','.join(map(str, self.ks))} "
            f"({'prior token share' if self.source == 'prior' else 'a draft token costs what a stream token costs'})"
        )


def _solve(rows: Sequence[Sequence[float]], ys: Sequence[float]) -> list[float] | None:
    """Least squares through the normal equations (2-3 unknowns); None when singular."""
    m = len(rows[0])
    ata = [[sum(r[i] * r[j] for r in rows) for j in range(m)] for i in range(m)]
    aty = [sum(r[i] * y for r, y in zip(rows, ys, strict=True)) for i in range(m)]
    aug = [ata[i] + [aty[i]] for i in range(m)]
    for col in range(m):
        piv = max(range(col, m), key=lambda i: abs(aug[i][col]))
        if abs(aug[piv][col]) < 1e-9 * max(1.0, max(abs(v) for v in aug[piv])):
            return None
        aug[col], aug[piv] = aug[piv], aug[col]
        for i in range(m):
            if i != col:
                f = aug[i][col] / aug[col][col]
                aug[i] = [vi - f * vc for vi, vc in zip(aug[i], aug[col], strict=True)]
    return [aug[i][m] / aug[i][i] for i in range(m)]


def _rel_rms(model: StepModel, points: Sequence[StepPoint]) -> float:
    errs = [(p.step_ms - model.step_ms(p.k, p.concurrency, p.fill)) / p.step_ms for p in points]
    return math.sqrt(sum(e * e for e in errs) / len(errs))


def fit_step_model(
    points: Sequence[StepPoint], prior_token_share: float = PRIOR_TOKEN_SHARE
) -> StepModel:
    pts = [p for p in points if p.step_ms > 0 and p.concurrency > 0]
    if not pts:
        raise ValueError("no measured step time (ITL) to fit")
    ks = tuple(sorted({p.k for p in pts}))
    ys = [p.step_ms for p in pts]
    notes: list[str] = []
    if len(ks) >= 2 and len(pts) >= 4:
        sol = _solve([[1.0, p.tokens, float(p.k)] for p in pts], ys)
        if sol is not None and sol[1] >= 0 and sol[2] >= 0:
            m = StepModel(sol[0], sol[1], sol[2], ks, 0.0, "fit+k")
            return StepModel(m.a_ms, m.b_ms, m.d_ms, ks, _rel_rms(m, pts), "fit+k")
        notes.append("per-position drafter cost not identifiable (or negative): left out")
    if len({p.tokens for p in pts}) >= 2:
        sol = _solve([[1.0, p.tokens] for p in pts], ys)
        if sol is not None and sol[1] >= 0:
            m = StepModel(sol[0], sol[1], 0.0, ks, 0.0, "fit")
            return StepModel(m.a_ms, m.b_ms, 0.0, ks, _rel_rms(m, pts), "fit", tuple(notes))
        notes.append("step time fell as verified tokens grew (noise?): prior share used")
    # one point, or a fit that makes no sense: the stated prior on the mean point
    t = sum(ys) / len(ys)
    n = sum(p.tokens for p in pts) / len(pts)
    b = prior_token_share * t / n
    m = StepModel(t - b * n, b, 0.0, ks, 0.0, "prior")
    notes.append(f"prior: {prior_token_share:.0%} of the measured step is per-token cost")
    return StepModel(m.a_ms, m.b_ms, 0.0, ks, _rel_rms(m, pts), "prior", tuple(notes))
