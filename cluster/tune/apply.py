"""`tune drafter --apply` (issue 33 item 3): the recommendation as one guarded rollout, and the
prediction judged against what that rollout measured. Pure: predictions and the rollout's
record in, the change, the guards and the `applied` record of `tune.json` out.

Guards (unless the operator gives --guard): for every level of the profile with a weight, the
measured aggregate change may not fall below the LOW end of the predicted change, or 0 % for a
level predicted to gain, by more than `GUARD_SLACK_PCT`. A level the recommendation trades away
(c=1 at a shorter k) may lose what was predicted; a level it was chosen for may not lose. A
measured gain smaller than predicted is kept (and recorded: the ratio judges the model).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tpwarden.cluster.durable import JSONObject, JSONValue
from tpwarden.cluster.rollout.edit import Guard
from tpwarden.cluster.tune.model import Prediction, Recommendation

GUARD_SLACK_PCT = 5.0
Rows = Mapping[int, Mapping[str, float]]  # a rollout measurement: concurrency -> {metric: value}


def change_for(k: int) -> str:
    """The rollout's `--set` for draft length k: k=0 is the server without a drafter."""
    if k < 0:
        raise ValueError(f"k={k}: a draft length is >= 0")
    return "drafter=null" if k == 0 else f"drafter.num_speculative_tokens={k}"


def _by(preds: Sequence[Prediction]) -> dict[tuple[int, int], Prediction]:
    return {(p.k, p.concurrency): p for p in preds}


def default_guards(
    preds: Sequence[Prediction],
    rec: Recommendation,
    profile: Mapping[int, float],
    slack_pct: float = GUARD_SLACK_PCT,
) -> list[Guard]:
    """One `c=N aggregate >= X%` guard per weighted profile level (see the module docstring)."""
    by = _by(preds)
    out = []
    for c in sorted(profile):
        if profile[c] <= 0:
            continue
        ref = by[(rec.k_ref, c)].aggregate_tok_s
        low_change = (by[(rec.k, c)].aggregate_lo / ref - 1.0) * 100.0
        out.append(Guard(c, "aggregate", ">=", round(min(low_change, 0.0) - slack_pct, 1)))
    return out


@dataclass(frozen=True)
class Judged:
    """One level after the rollout: what was predicted at the new k, what was measured."""

    concurrency: int
    predicted: float
    lo: float
    hi: float
    before: float | None  # measured at the old k (the tune sweep)
    measured: float | None  # measured at the new k (the rollout's after sweep)

    @property
    def ratio(self) -> float | None:
        """measured / predicted: 1.0 is a perfect prediction."""
        return (
            None if self.measured is None or self.predicted <= 0 else self.measured / self.predicted
        )

    @property
    def within(self) -> bool | None:
        return None if self.measured is None else self.lo <= self.measured <= self.hi

    def to_json(self) -> JSONObject:
        return {
            "concurrency": self.concurrency,
            "predicted_tok_s": self.predicted,
            "predicted_95": [self.lo, self.hi],
            "before_tok_s": self.before,
            "measured_tok_s": self.measured,
            "ratio": self.ratio,
            "within_band": self.within,
        }


def judge(preds: Sequence[Prediction], k: int, before: Rows, after: Rows) -> list[Judged]:
    """Predicted aggregate at draft length k against the measured one, per predicted level."""
    out = []
    for p in sorted((p for p in preds if p.k == k), key=lambda p: p.concurrency):
        b = before.get(p.concurrency, {}).get("aggregate")
        a = after.get(p.concurrency, {}).get("aggregate")
        out.append(Judged(p.concurrency, p.aggregate_tok_s, p.aggregate_lo, p.aggregate_hi, b, a))
    return out


def measured_score(profile: Mapping[int, float], before: Rows, after: Rows) -> float | None:
    """The profile's weighted mean gain as measured (the predicted one is the recommendation's
    score); None when a weighted level lacks a measurement on either side."""
    s = 0.0
    for c, w in profile.items():
        b = before.get(c, {}).get("aggregate")
        a = after.get(c, {}).get("aggregate")
        if w > 0 and (not b or a is None):
            return None
        s += w * (a or 0.0) / (b or 1.0)
    return s


def rows_of(doc: Mapping[str, JSONValue] | None) -> dict[int, dict[str, float]]:
    """A rollout record's `baseline` / `after` section -> rows keyed by int concurrency."""
    return {int(c): dict(v) for c, v in ((doc or {}).get("rows") or {}).items()}


def applied_doc(
    record: Mapping[str, JSONValue],
    preds: Sequence[Prediction],
    rec: Recommendation,
    profile: Mapping[int, float],
    after_levels: Sequence[Mapping[str, JSONValue]] | None = None,
) -> JSONObject:
    """The `applied` section of `tune.json`: which rollout, kept or not, and per level the
    prediction against the measurement (what later runs read to judge the model)."""
    before, after = rows_of(record.get("baseline")), rows_of(record.get("after"))
    levels = judge(preds, rec.k, before, after) if after else []
    return {
        "rollout_id": record.get("id"),
        "step": record.get("step"),
        "kept": record.get("step") == "done",
        "reason": record.get("reason"),
        "from_k": rec.k_ref,
        "to_k": rec.k,
        "change": change_for(rec.k),
        "guards": list(record.get("guards") or []),
        "verdicts": list(record.get("verdicts") or []),
        "predicted_score": rec.score,
        "measured_score": measured_score(profile, before, after) if after else None,
        "levels": [j.to_json() for j in levels],
        "after_run_dir": (record.get("after") or {}).get("run_dir"),
        "after_levels": list(after_levels) if after_levels is not None else None,
    }


def not_applied(rec: Recommendation, step: str, reason: str) -> JSONObject:
    """`applied` when no rollout ran: the recommendation is the current k, or the operator
    declined."""
    return {
        "rollout_id": None,
        "step": step,
        "kept": False,
        "reason": reason,
        "from_k": rec.k_ref,
        "to_k": rec.k,
        "change": None,
        "predicted_score": rec.score,
        "measured_score": None,
        "levels": [],
    }
