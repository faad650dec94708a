"""`tune drafter --apply` (issue 33 item 3), pure half: the change a recommendation makes, the
guards derived from the predictions (checked against the field report's own k=7 -> k=3 rollout),
predicted against measured per level, and the history lines a later run prints."""

from __future__ import annotations

from pathlib import Path

import pytest
from tpwarden.cluster.rollout.edit import check_guard, parse_guard, parse_set
from tpwarden.cluster.tune.apply import (
    GUARD_SLACK_PCT,
    applied_doc,
    change_for,
    default_guards,
    judge,
    measured_score,
    not_applied,
)
from tpwarden.cluster.tune.history import applied_lines, last_applied
from tpwarden.cluster.tune.model import fit, predict, recommend

from tests.unit.test_tune_model import _field_levels

SHARED = {1: 0.2, 8: 0.5, 32: 0.3}  # the report's shared server
# The report's rollout (k=7 -> k=3), aggregate tok/s: c=1 per stream = aggregate
BEFORE = {1: {"aggregate": 12.6}, 8: {"aggregate": 72.2}, 32: {"aggregate": 144.8}}
AFTER = {1: {"aggregate": 11.1}, 8: {"aggregate": 72.0}, 32: {"aggregate": 171.0}}


def _field_prediction():
    levels = _field_levels()
    preds = predict(levels, fit(levels))
    return preds, recommend(preds, SHARED, k_ref=7)


def test_change_for_is_a_set_the_rollout_accepts():
    assert change_for(3) == "drafter.num_speculative_tokens=3"
    assert change_for(0) == "drafter=null"  # k'=0: the no-drafter server
    assert parse_set(change_for(5)).value == 5 and parse_set(change_for(0)).value is None
    with pytest.raises(ValueError):
        change_for(-1)


def test_default_guards_allow_the_predicted_trade_not_a_loss_where_a_gain_was_predicted():
    preds, rec = _field_prediction()
    assert rec.k == 3
    guards = {g.concurrency: g for g in default_guards(preds, rec, SHARED)}
    assert sorted(guards) == [1, 8, 32] and all(g.metric == "aggregate" for g in guards.values())
    by = {(p.k, p.concurrency): p for p in preds}
    c1_low = (by[(3, 1)].aggregate_lo / by[(7, 1)].aggregate_tok_s - 1) * 100
    assert c1_low < 0  # c=1 is predicted to possibly lose: that loss is allowed, plus the slack
    assert guards[1].percent == pytest.approx(c1_low - GUARD_SLACK_PCT, abs=0.05)
    assert guards[32].percent == -GUARD_SLACK_PCT  # c=32 was chosen for its gain: no loss
    # the guard text round-trips through the rollout's parser (it is recorded and shown)
    assert parse_guard(str(guards[1])) == guards[1]
    # the report's real outcome is kept: c=1 lost 12 %, c=32 gained 18 %
    assert all(check_guard(g, BEFORE, AFTER).ok for g in guards.values())
    # a c=32 that lost throughput would have been rolled back
    worse = {**AFTER, 32: {"aggregate": 130.0}}
    assert not check_guard(guards[32], BEFORE, worse).ok
    # a level with no weight gets no guard
    assert [g.concurrency for g in default_guards(preds, rec, {1: 0.0, 32: 1.0})] == [32]


def test_judge_predicted_against_measured_per_level():
    preds, rec = _field_prediction()
    judged = {j.concurrency: j for j in judge(preds, 3, BEFORE, AFTER)}
    assert sorted(judged) == [1, 4, 8, 16, 32]  # every predicted level, measured or not
    c32 = judged[32]
    p32 = next(p for p in preds if p.k == 3 and p.concurrency == 32)
    assert c32.predicted == p32.aggregate_tok_s and c32.measured == 171.0
    assert c32.ratio == pytest.approx(171.0 / p32.aggregate_tok_s)
    assert c32.ratio < 1  # docs/tune.md: the one-k model over-predicts c=32
    assert c32.within is (p32.aggregate_lo <= 171.0 <= p32.aggregate_hi)
    assert judged[4].measured is None and judged[4].ratio is None and judged[4].within is None
    assert judged[4].before is None and judged[1].before == 12.6


def test_measured_score_weights_the_measured_gains():
    assert measured_score(SHARED, BEFORE, AFTER) == pytest.approx(
        0.2 * 11.1 / 12.6 + 0.5 * 72.0 / 72.2 + 0.3 * 171.0 / 144.8
    )
    assert measured_score({1: 0.5, 4: 0.5}, BEFORE, AFTER) is None  # c=4 not measured
    assert measured_score({1: 1.0, 4: 0.0}, BEFORE, AFTER) == pytest.approx(11.1 / 12.6)


def _record(step="done"):
    def rows(r):
        return {"rows": {str(c): v for c, v in r.items()}, "run_dir": "runs/x"}

    return {
        "id": "20261204-090000",
        "step": step,
        "reason": None if step == "done" else "guard failed: aggregate at c=32",
        "guards": ["c=32 aggregate >= -5%"],
        "verdicts": [{"guard": "c=32 aggregate >= -5%", "ok": step == "done"}],
        "baseline": rows(BEFORE),
        "after": rows(AFTER),
    }


def test_applied_doc_and_the_lines_a_later_run_prints():
    preds, rec = _field_prediction()
    doc = applied_doc(_record(), preds, rec, SHARED, after_levels=[{"concurrency": 1}])
    assert doc["kept"] is True and (doc["from_k"], doc["to_k"]) == (7, 3)
    assert doc["change"] == "drafter.num_speculative_tokens=3"
    assert doc["predicted_score"] == rec.score
    assert doc["measured_score"] == pytest.approx(measured_score(SHARED, BEFORE, AFTER))
    assert doc["after_run_dir"] == "runs/x" and doc["after_levels"] == [{"concurrency": 1}]
    c32 = next(lv for lv in doc["levels"] if lv["concurrency"] == 32)
    lines = applied_lines({"applied": doc})
    assert lines[0] == "k=7 -> k=3 (rollout 20261204-090000, kept)"
    assert (
        f"c=32: predicted {c32['predicted_tok_s']:,.1f} tok/s, measured 171.0 "
        f"(measured/predicted {c32['ratio']:.2f})"
    ) in lines
    assert "c=4: predicted" in "\n".join(lines) and "c=4" in next(
        ln for ln in lines if "not measured" in ln
    )
    assert lines[-1].startswith(f"profile gain: predicted {rec.score:.3f}x, measured ")
    rolled = applied_lines({"applied": applied_doc(_record("rolled_back"), preds, rec, SHARED)})
    assert rolled[0].endswith("rolled_back: guard failed: aggregate at c=32)")
    assert applied_lines({"applied": not_applied(rec, "not_needed", "same k")}) == []
    assert applied_lines({}) == []


def test_last_applied_is_the_latest_run_that_was_rolled_out():
    preds, rec = _field_prediction()
    ap = {"applied": applied_doc(_record(), preds, rec, SHARED)}
    docs = [
        ("20261201T010000Z-sweep", ap),
        ("20261203T010000Z-sweep", {"applied": not_applied(rec, "declined", "no")}),
        ("20261202T010000Z-sweep", ap),
        ("20261204T010000Z-sweep", {}),
    ]
    got = last_applied(docs)
    assert got is not None and got[0] == "20261202T010000Z-sweep"
    assert last_applied(docs[1:2]) is None and last_applied([]) is None


def test_docs_state_the_field_reports_guards():
    """docs/tune.md section 7 quotes these guards: keep the text and the rule in step."""
    preds, rec = _field_prediction()
    got = {g.concurrency: g.percent for g in default_guards(preds, rec, SHARED)}
    assert got == {1: -18.6, 8: -5.4, 32: -5.0}
    docs = (Path(__file__).parents[2] / "docs" / "tune.md").read_text()
    assert "c=1 ≥ −18.6 %, c=8 ≥ −5.4 %, c=32 ≥ −5 %" in docs
