"""The morning report's tuning runs: each `tune drafter` run directory's `tune.json` as one
summary (what was measured and recommended, whether it was applied, and what the rollout
measured against the prediction). Pure; ``morning_io.load_tunes`` reads the files,
``morning.build_morning`` keeps the runs that started in the window."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tpwarden.cluster.durable import JSONObject, JSONValue


@dataclass(frozen=True, kw_only=True)
class TuneSummary:
    run_id: str
    started_at: float
    measured_k: int | None
    recommended_k: int | None
    profile: dict[str, float]
    predicted_gain: float | None  # the recommendation's profile score against the measured k
    distinguishable: bool | None  # its band clears the runner-up
    applied: str | None  # the rollout's end (done, rolled_back, failed), not_needed, declined;
    # None: --apply was not asked
    to_k: int | None
    kept: bool | None
    measured_gain: float | None  # the profile score the rollout measured
    levels: tuple[JSONObject, ...]  # per level: c, predicted, measured, ratio


def _num(v: JSONValue) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def tune_summary(run_id: str, started_at: float, doc: Mapping[str, JSONValue]) -> TuneSummary:
    """One tune.json as the report shows it; missing fields stay None (an older or partly
    written document)."""
    rec = doc.get("recommendation") or {}
    ap = doc.get("applied") or {}
    levels = tuple(
        {
            "concurrency": lv.get("concurrency"),
            "predicted_tok_s": _num(lv.get("predicted_tok_s")),
            "measured_tok_s": _num(lv.get("measured_tok_s")),
            "ratio": _num(lv.get("ratio")),
        }
        for lv in ap.get("levels") or []
    )
    return TuneSummary(
        run_id=run_id,
        started_at=started_at,
        measured_k=doc.get("measured_k"),
        recommended_k=rec.get("k"),
        profile=dict(doc.get("profile") or {}),
        predicted_gain=_num(rec.get("score")),
        distinguishable=rec.get("distinguishable"),
        applied=ap.get("step") if ap else None,
        to_k=ap.get("to_k") if ap else None,
        kept=ap.get("kept") if ap else None,
        measured_gain=_num(ap.get("measured_score")),
        levels=levels,
    )


def tune_line(t: TuneSummary) -> str:
    """One line: "k=7 measured, k=3 recommended (1.139x predicted); applied: kept, 1.096x
    measured; c=32 predicted 199.4, measured 171.0 (0.86)"."""
    gain = "-" if t.predicted_gain is None else f"{t.predicted_gain:.3f}x"
    sure = "" if t.distinguishable is not False else ", within the uncertainty"
    head = f"k={t.measured_k} measured, k={t.recommended_k} recommended ({gain} predicted{sure})"
    if t.applied is None:
        return f"{head}; not applied"
    what = "kept" if t.kept else t.applied
    got = "" if t.measured_gain is None else f", {t.measured_gain:.3f}x measured"
    per = "; ".join(_level_text(lv) for lv in t.levels if lv["predicted_tok_s"] is not None)
    return f"{head}; applied: {what}{got}" + (f"; {per}" if per else "")


def _level_text(lv: Mapping[str, JSONValue]) -> str:
    got, ratio = lv["measured_tok_s"], lv["ratio"]
    measured = "not measured" if got is None else f"measured {got:,.1f}"
    return f"c={lv['concurrency']} predicted {lv['predicted_tok_s']:,.1f}, {measured}" + (
        "" if ratio is None else f" ({ratio:.2f})"
    )
