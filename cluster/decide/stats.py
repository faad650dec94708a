"""Summary statistics of a decision run. Pure.

Wilson score interval for accuracy, nearest-rank percentiles for latency, flips between repeated
runs (with a margin-bin table: do flips concentrate at small margins?) and position bias (how often
each label is predicted vs how often it is right; with reordered choices, how often the chosen
*text* survives the reordering).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tpwarden.cluster.durable import JSONObject

MARGIN_EDGES = (0.0, 0.05, 0.1, 0.2, 0.4, 1.0000001)


def wilson(successes: int, n: int, z: float = 1.959964) -> tuple[float, float] | None:
    """95 % Wilson score interval (None for n == 0)."""
    if n == 0:
        return None
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100)."""
    if not values:
        return None
    s = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(s)))
    return s[rank - 1]


def latency_summary(values_ms: Sequence[float]) -> dict[str, float | int | None]:
    return {
        "n": len(values_ms),
        "p50": percentile(values_ms, 50),
        "p95": percentile(values_ms, 95),
        "mean": sum(values_ms) / len(values_ms) if values_ms else None,
    }


@dataclass(frozen=True)
class Flip:
    id: str
    decisions: tuple[str, ...]  # one per run
    min_margin: float
    mean_margin: float


def find_flips(
    runs: Sequence[Mapping[str, tuple[str, float]]],
) -> tuple[list[Flip], dict[str, float]]:
    """`runs`: per run, item id -> (decision, margin). Returns the items whose decision changed
    across runs, and every item's mean margin (for the bin table)."""
    ids = [i for i in runs[0] if all(i in r for r in runs)] if runs else []
    flips, mean_margin = [], {}
    for i in ids:
        ds = tuple(r[i][0] for r in runs)
        ms = [r[i][1] for r in runs]
        mean_margin[i] = sum(ms) / len(ms)
        if len(set(ds)) > 1:
            flips.append(Flip(i, ds, min(ms), mean_margin[i]))
    flips.sort(key=lambda f: f.min_margin)
    return flips, mean_margin


def flips_by_margin(
    flips: Sequence[Flip], mean_margin: Mapping[str, float], edges: Sequence[float] = MARGIN_EDGES
) -> list[JSONObject]:
    """Per margin bin (of each item's mean margin): items, flips, flip rate."""
    flipped = {f.id for f in flips}
    rows = []
    for lo, hi in zip(edges, edges[1:], strict=False):
        ids = [i for i, m in mean_margin.items() if lo <= m < hi]
        n_flip = sum(i in flipped for i in ids)
        rows.append(
            {
                "margin_lo": lo,
                "margin_hi": min(hi, 1.0),
                "items": len(ids),
                "flips": n_flip,
                "flip_rate": n_flip / len(ids) if ids else None,
            }
        )
    return rows


def position_table(
    decisions: Sequence[str], answers: Sequence[str | None], labels: Sequence[str]
) -> list[JSONObject]:
    """Per label: how often predicted, how often the right answer, accuracy when it is right.
    A model without position bias predicts each label about as often as it is right."""
    predicted = Counter(decisions)
    gold = Counter(a for a in answers if a is not None)
    rows = []
    for lab in labels:
        right_here = [d == a for d, a in zip(decisions, answers, strict=True) if a == lab]
        rows.append(
            {
                "label": lab,
                "predicted": predicted.get(lab, 0),
                "gold": gold.get(lab, 0),
                "accuracy_when_gold": sum(right_here) / len(right_here) if right_here else None,
            }
        )
    return rows


def chi_square_uniform(counts: Sequence[int]) -> float:
    """Pearson chi-square of counts against a uniform spread (df = len - 1)."""
    n = sum(counts)
    if not n or len(counts) < 2:
        return 0.0
    e = n / len(counts)
    return sum((c - e) ** 2 / e for c in counts)


def order_consistency(
    original: Mapping[str, str], permuted: Mapping[str, str], mappings: Mapping[str, dict[str, str]]
) -> JSONObject:
    """`original`: id -> chosen label; `permuted`: id -> chosen label with the choices reordered;
    `mappings`: id -> permuted label -> original label. The chosen *text* should not move when
    the order does; how often it moves, and where the permuted picks land, measures position bias."""
    same, lands = 0, Counter[str]()
    ids = [i for i in original if i in permuted]
    for i in ids:
        back = mappings[i][permuted[i]]
        same += back == original[i]
        lands[permuted[i]] += 1
    return {
        "items": len(ids),
        "same_choice": same,
        "consistency": same / len(ids) if ids else None,
        "permuted_picks_by_position": dict(sorted(lands.items())),
    }
