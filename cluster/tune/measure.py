"""Two /metrics pages (before and after a bench level) -> the level's `DraftCounts`. Pure.

Totals are read with the project's one parser (`vllm.metrics.sum_by_sample`, summed over
engines and models). The per-position series needs its `position` label, which that parser sums
away; it is read here with the same library call (prometheus_client's
`text_string_to_metric_families`), summing every other label, so one page's reading cannot
differ between the two.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families
from tpwarden.cluster.tune.acceptance import DraftCounts
from tpwarden.cluster.vllm.metrics import sum_by_sample

DRAFTS = "vllm:spec_decode_num_drafts_total"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"


class NoSpecCounters(ValueError):
    """The page has no spec-decode counters: the server runs no drafter (or is not vLLM)."""


@dataclass(frozen=True)
class Snapshot:
    drafts: float
    draft_tokens: float | None
    per_pos: dict[int, float]


def per_position(text: str) -> dict[int, float]:
    """{position: accepted count} summed over every other label (engines, models)."""
    out: dict[int, float] = {}
    try:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.name == PER_POS and "position" in s.labels:
                    pos = int(s.labels["position"])
                    out[pos] = out.get(pos, 0.0) + float(s.value)
    except (TypeError, IndexError) as exc:
        raise ValueError(f"{type(exc).__name__}: {exc}") from exc
    return out


def snapshot(text: str) -> Snapshot:
    totals = sum_by_sample(text)
    if DRAFTS not in totals:
        raise NoSpecCounters(f"no {DRAFTS} on the page: no drafter running")
    return Snapshot(totals[DRAFTS], totals.get(DRAFT_TOKENS), per_position(text))


def window(before: str, after: str) -> DraftCounts:
    """The counts between two pages of the same server. ValueError when a counter went down
    (the server restarted in between) or the positions changed (k changed)."""
    a, b = snapshot(before), snapshot(after)
    if set(a.per_pos) != set(b.per_pos):
        raise ValueError(
            f"positions {sorted(a.per_pos)} before, {sorted(b.per_pos)} after: k changed"
        )
    positions = sorted(b.per_pos)
    if positions != list(range(len(positions))):
        raise ValueError(f"positions {positions}: not 0..k-1")
    deltas = [b.per_pos[j] - a.per_pos[j] for j in positions]
    drafts = b.drafts - a.drafts
    tokens = (
        None
        if a.draft_tokens is None or b.draft_tokens is None
        else b.draft_tokens - a.draft_tokens
    )
    if drafts < 0 or min(deltas, default=0.0) < 0 or (tokens is not None and tokens < 0):
        raise ValueError("a counter went down between the pages: the server restarted")
    return DraftCounts(
        drafts=round(drafts),
        accepted_per_pos=tuple(round(d) for d in deltas),
        draft_tokens=None if tokens is None else round(tokens),
    )
