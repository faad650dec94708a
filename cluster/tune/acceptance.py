"""Per-position acceptance from vLLM's spec-decode counters, and tokens per verify step for any
draft length k'. Pure.

vLLM (v1/spec_decode/metrics.py, `observe_draft`) counts, per draft, one accepted token at each
position 0..a-1 where a is the number of draft tokens accepted: `accepted_per_pos[j]` / `drafts`
is the SURVIVAL r_j = P(a >= j+1), not a conditional rate. Verification stops at the first
rejection, so a draft truncated to k' positions accepts min(a, k') tokens and

    E[tokens per step](k') = 1 + sum_{j<k'} r_j        (the 1 is the verify step's own token)

holds for every k' up to the measured k, whatever the drafts' lengths (a shorter draft is cut
the same way). The uncertainty is that of a mean over `drafts` independent drafts:
Var(min(a, k')) = sum_{j<k'} (2j+1) r_j - (sum_{j<k'} r_j)^2, standard error sqrt(Var / drafts).
Drafts of one request are not independent; the error is a lower bound on the real one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

Z95 = 1.959963984540054


@dataclass(frozen=True)
class DraftCounts:
    """Counter deltas over one measurement window: the drafter ran with k = len(accepted_per_pos)
    positions. `draft_tokens` (proposed tokens) is optional: drafters such as n-gram propose
    fewer than k tokens when their match is short."""

    drafts: int
    accepted_per_pos: tuple[int, ...]
    draft_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.drafts < 0 or any(a < 0 for a in self.accepted_per_pos):
            raise ValueError("counts must not be negative (a counter reset inside the window?)")
        prev = self.drafts
        for j, a in enumerate(self.accepted_per_pos):
            if a > prev:
                raise ValueError(
                    f"position {j} accepted {a} > {prev} at the position before: not one "
                    "window of vLLM's survival counters"
                )
            prev = a

    @property
    def k(self) -> int:
        return len(self.accepted_per_pos)

    @property
    def accepted(self) -> int:
        return sum(self.accepted_per_pos)

    @property
    def fill(self) -> float:
        """Proposed tokens per draft / k: 1.0 for a drafter that always proposes k (DFlash,
        EAGLE, MTP); below 1 for n-gram. 1.0 when the counter is absent or nothing was drafted."""
        if self.draft_tokens is None or not self.drafts or not self.k:
            return 1.0
        return min(1.0, self.draft_tokens / (self.drafts * self.k))


@dataclass(frozen=True)
class Rate:
    p: float
    lo: float
    hi: float
    n: int


@dataclass(frozen=True)
class Estimate:
    """A mean with its standard error; `extrapolated` says why it reaches beyond the data."""

    mean: float
    se: float
    extrapolated: tuple[str, ...] = ()

    @property
    def lo(self) -> float:
        return self.mean - Z95 * self.se

    @property
    def hi(self) -> float:
        return self.mean + Z95 * self.se


def wilson(successes: int, n: int, z: float = Z95) -> Rate:
    """Wilson score interval of a binomial proportion (well behaved near 0 and 1)."""
    if n <= 0:
        return Rate(math.nan, 0.0, 1.0, 0)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return Rate(p, max(0.0, centre - half), min(1.0, centre + half), n)


def survival(counts: DraftCounts) -> list[Rate]:
    """r_j = P(at least j+1 draft tokens accepted), with Wilson 95% intervals over `drafts`."""
    return [wilson(a, counts.drafts) for a in counts.accepted_per_pos]


def conditional(counts: DraftCounts) -> list[Rate]:
    """P(position j accepted | positions before it accepted) = A_j / A_{j-1}, Wilson intervals
    over A_{j-1} (the drafts that reached position j)."""
    out, prev = [], counts.drafts
    for a in counts.accepted_per_pos:
        out.append(wilson(a, prev))
        prev = a
    return out


def acceptance_rate(counts: DraftCounts) -> float | None:
    """vLLM's "acceptance rate": accepted / proposed draft tokens (drafts * k when the proposed
    count is absent). The field report's 20% at k=7 and 41% at k=3 are this rate."""
    proposed = counts.draft_tokens if counts.draft_tokens is not None else counts.drafts * counts.k
    return counts.accepted / proposed if proposed else None


def tokens_per_step_from_rate(rate: float, k: int, fill: float = 1.0) -> float:
    """The definition that ties vLLM's two summaries together: 1 + rate * proposed per draft."""
    return 1.0 + rate * k * fill


def _extended(counts: DraftCounts, k_prime: int) -> tuple[list[float], tuple[str, ...]]:
    n = counts.drafts
    r = [a / n for a in counts.accepted_per_pos[:k_prime]]
    if k_prime <= counts.k:
        return r, ()
    # beyond the measured k: hold the last measured conditional rate for every further position
    cond = conditional(counts)
    q = cond[-1].p if cond and not math.isnan(cond[-1].p) else 0.0
    last = r[-1] if r else 1.0
    for _ in range(k_prime - counts.k):
        last *= q
        r.append(last)
    why = (
        f"k'={k_prime} > measured k={counts.k}: positions {counts.k}..{k_prime - 1} assume the "
        f"last measured conditional rate {q:.2f}"
    )
    return r, (why,)


def tokens_per_step(counts: DraftCounts, k_prime: int) -> Estimate:
    """Expected tokens per verify step with the draft cut to k' positions; k'=0 is no drafter
    (exactly one token per step)."""
    if k_prime < 0:
        raise ValueError("k' must be >= 0")
    if k_prime == 0:
        return Estimate(1.0, 0.0)
    if counts.drafts <= 0:
        raise ValueError("no drafts in the window: nothing to predict from")
    r, why = _extended(counts, k_prime)
    mean_len = sum(r)
    second = sum((2 * j + 1) * rj for j, rj in enumerate(r))
    var = max(0.0, second - mean_len * mean_len) / counts.drafts
    return Estimate(1.0 + mean_len, math.sqrt(var), why)


def pooled(windows: list[DraftCounts]) -> DraftCounts:
    """Several windows of the same k summed (acceptance is a property of the text and the
    drafter; concurrency changes it little)."""
    if not windows:
        raise ValueError("no windows to pool")
    ks = {w.k for w in windows}
    if len(ks) != 1:
        raise ValueError(f"windows with different k {sorted(ks)} cannot be pooled")
    tokens = [w.draft_tokens for w in windows]
    return DraftCounts(
        drafts=sum(w.drafts for w in windows),
        accepted_per_pos=tuple(
            sum(col) for col in zip(*(w.accepted_per_pos for w in windows), strict=True)
        ),
        draft_tokens=None if any(t is None for t in tokens) else sum(t or 0 for t in tokens),
    )
