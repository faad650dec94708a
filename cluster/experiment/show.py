"""What `experiment show` reads out of a night's files (pure): each canary level against
production's opening canary, and the events that concern one variant."""

from __future__ import annotations

from collections.abc import Iterable

from tpwarden.cluster.durable import JSONObject, JSONValue

# a canary level's figures (`LevelRow`), in the order they are shown
FIGURES = ("output_tok_s", "per_stream_tok_s", "ttft_p50_ms", "itl_p50_ms", "acceptance_pct",
           "tokens_per_step")  # fmt: skip


def _levels(canary: JSONValue) -> dict[int, JSONObject]:
    levels = canary.get("levels") if isinstance(canary, dict) else None
    out: dict[int, JSONObject] = {}
    for lv in levels if isinstance(levels, list) else []:
        if isinstance(lv, dict) and isinstance(lv.get("level"), int):
            out[int(lv["level"])] = lv
    return out


def _num(value: JSONValue) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def compare_levels(canary: JSONValue, base: JSONValue) -> list[JSONObject]:
    """Each level of `canary` with every figure beside production's (`base`, its opening
    canary) and their ratio: `{"level": 1, "figures": {"output_tok_s": {"value": 13.2,
    "production": 12.0, "ratio": 1.1}, ...}}`; a figure missing on either side has no ratio."""
    prod = _levels(base)
    rows: list[JSONObject] = []
    for level, lv in sorted(_levels(canary).items()):
        figures: JSONObject = {}
        for name in FIGURES:
            value, was = _num(lv.get(name)), _num(prod.get(level, {}).get(name))
            ratio = round(value / was, 4) if value is not None and was else None
            figures[name] = {"value": value, "production": was, "ratio": ratio}
        rows.append({"level": level, "figures": figures})
    return rows


def variant_events(events: Iterable[JSONObject], name: str) -> list[JSONObject]:
    """The night's events that name the variant, in order."""
    return [e for e in events if e.get("variant") == name]
