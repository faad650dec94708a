"""The draft-length advisor's model (issue 33): acceptance, step time, prediction and
recommendation, checked against the field report's own k=7 -> k=3 numbers and against a
scripted simulator where the best k is found by evaluating every k."""

from __future__ import annotations

import math
from math import prod

import pytest
from tpwarden.cluster.tune.acceptance import (
    DraftCounts,
    acceptance_rate,
    conditional,
    pooled,
    survival,
    tokens_per_step,
    tokens_per_step_from_rate,
    wilson,
)
from tpwarden.cluster.tune.model import LevelMeasure, fit, parse_profile, predict, recommend
from tpwarden.cluster.tune.steptime import StepPoint, fit_step_model

# --- the field report (docs/tune.md, "Reproducing the field report") -------------------------
# k=7 sweep: (concurrency, aggregate tok/s, ITL p50 ms); 20 prompts x 512 tokens per level.
FIELD_K7 = [
    (1, 12.6, 185.0),
    (4, 41.4, 214.0),
    (8, 72.2, 226.0),
    (16, 99.3, 340.0),
    (32, 144.8, 477.0),
]
# Drafts per level: 20 x 512 tokens at 2.39 tokens per step.
FIELD_DRAFTS = round(20 * 512 / 2.39)
# The report gives no per-position counts, only two sums: 2.39 tokens/step at k=7 (survival sum
# over 7 positions 1.39) and 2.23 at k=3 (sum over the first 3 positions 1.23). This monotone
# survival curve has both sums; the k'=3 and k'=7 predictions depend on nothing else.
FIELD_SURVIVAL = [0.58, 0.39, 0.26, 0.08, 0.045, 0.025, 0.01]


def _counts(survival_curve: list[float], drafts: int) -> DraftCounts:
    return DraftCounts(drafts, tuple(round(r * drafts) for r in survival_curve))


def _field_levels() -> list[LevelMeasure]:
    counts = _counts(FIELD_SURVIVAL, FIELD_DRAFTS)
    return [LevelMeasure(c, counts, itl, agg) for c, agg, itl in FIELD_K7]


@pytest.mark.parametrize(("pct", "k", "tps"), [(20, 7, 2.39), (41, 3, 2.23)])
def test_field_report_acceptance_is_accepted_over_proposed(pct, k, tps):
    """ "Acceptance" in the report is vLLM's accepted / proposed draft tokens: 1 + rate * k gives
    its tokens per step for both rows, within the rounding of the printed percentage."""
    lo, hi = (
        tokens_per_step_from_rate((pct - 0.5) / 100, k),
        tokens_per_step_from_rate((pct + 0.5) / 100, k),
    )
    assert lo <= tps <= hi
    # the other readings do not fit: tokens/step / (k+1), and the accepted share of emitted tokens
    assert round(100 * tps / (k + 1)) != pct
    assert round(100 * (tps - 1) / tps) != pct


def test_field_report_k3_row_predicted_from_k7_counters_within_band():
    counts = _counts(FIELD_SURVIVAL, FIELD_DRAFTS)
    assert round(100 * acceptance_rate(counts)) == 20
    at7, at3 = tokens_per_step(counts, 7), tokens_per_step(counts, 3)
    assert at7.lo <= 2.39 <= at7.hi
    assert at3.lo <= 2.23 <= at3.hi  # the k=3 row, measured after a restart, from k=7's counters
    assert round(100 * (at3.mean - 1) / 3) == 41  # and its printed acceptance
    assert not at3.extrapolated
    # stated uncertainty: ~0.02 tokens/step from ~4,300 drafts, not a blanket tolerance
    assert 0.01 < at3.se < 0.03


def test_any_monotone_curve_with_the_k7_sum_brackets_the_k3_row():
    """Whatever the per-position shape, survival is non-increasing: with 1.39 accepted per draft
    over 7 positions the first 3 hold between 3/7 of it and all of it. The report's k=3 row lies
    inside, so the two rows are consistent with the truncation identity."""
    s7 = 2.39 - 1
    assert 1 + 3 / 7 * s7 <= 2.23 <= 1 + s7


def test_field_report_directions_c1_loses_c32_gains():
    levels = _field_levels()
    model = fit(levels)
    assert model.source == "fit" and model.ks == (7,)
    preds = {(p.k, p.concurrency): p for p in predict(levels, model)}
    # k=7 is the measurement: anchored predictions reproduce the measured aggregates
    for c, agg, _ in FIELD_K7:
        assert preds[(7, c)].aggregate_tok_s == pytest.approx(agg)
        assert preds[(7, c)].measured
    # c=1: one user loses (report: 12.7 -> 11.1 per stream)
    assert preds[(3, 1)].per_stream_tok_s < preds[(7, 1)].per_stream_tok_s
    # c=32: many users gain (report: 144.8 -> 171.0), and the step gets shorter (477 -> 356 ms)
    assert preds[(3, 32)].aggregate_tok_s > preds[(7, 32)].aggregate_tok_s
    assert preds[(3, 32)].step_ms < preds[(7, 32)].step_ms
    assert preds[(3, 32)].extrapolated  # k=3 was not measured: said so
    # c=8 about even (report: 72.2 vs 72.0) lies inside the band the model states
    assert preds[(3, 8)].aggregate_lo <= 72.0 <= preds[(3, 8)].aggregate_hi


def test_field_report_profiles_shared_server_k3_personal_long_draft():
    levels = _field_levels()
    preds = predict(levels, fit(levels))
    shared = recommend(preds, parse_profile("c1:0.2,c8:0.5,c32:0.3"), k_ref=7)
    assert shared.k == 3 and shared.score > 1.05
    assert shared.extrapolated  # k=3 is a prediction from k=7
    personal = recommend(preds, parse_profile("c1:1"), k_ref=7)
    assert personal.k >= 5
    # ... and k=7 is within its uncertainty: the model does not claim a gain it cannot see
    assert not personal.distinguishable or personal.k == 7


# --- acceptance --------------------------------------------------------------------------------


def test_no_drafter_is_a_valid_k_prime():
    counts = _counts(FIELD_SURVIVAL, FIELD_DRAFTS)
    e = tokens_per_step(counts, 0)
    assert (e.mean, e.se, e.extrapolated) == (1.0, 0.0, ())
    levels = _field_levels()
    model = fit(levels)
    p0 = next(p for p in predict(levels, model) if p.k == 0 and p.concurrency == 32)
    assert p0.tokens_per_step.mean == 1.0
    assert p0.step_ms == pytest.approx(model.a_ms + model.b_ms * 32)
    assert any("k'=0" in w for w in p0.extrapolated)


def test_no_drafter_wins_when_acceptance_is_poor_and_load_high():
    """Random tokens (the report: 10% acceptance) at c=32: drafting costs more than it gives."""
    poor = _counts([0.2, 0.1, 0.05, 0.02], 5000)
    levels = [LevelMeasure(c, poor, 20 + 0.9 * c * 5) for c in (1, 32)]
    preds = predict(levels, fit(levels))
    assert recommend(preds, parse_profile("c32:1"), k_ref=4).k == 0


def test_standard_error_is_that_of_the_truncated_accepted_length():
    """Drafts with known accepted lengths: the formula's SE equals the plain standard error of
    min(a, k') over the drafts, and its mean the plain mean."""
    lengths = [0] * 30 + [1] * 25 + [2] * 20 + [3] * 15 + [4] * 10
    counts = DraftCounts(len(lengths), tuple(sum(a > j for a in lengths) for j in range(4)))
    for kp in range(5):
        xs = [min(a, kp) for a in lengths]
        mean = sum(xs) / len(xs)
        var = sum((x - mean) ** 2 for x in xs) / len(xs)
        e = tokens_per_step(counts, kp)
        assert e.mean == pytest.approx(1 + mean)
        assert e.se == pytest.approx(math.sqrt(var / len(xs)))


def test_survival_conditional_and_wilson():
    counts = DraftCounts(1000, (600, 300, 90))
    assert [r.p for r in survival(counts)] == [0.6, 0.3, 0.09]
    assert [r.p for r in conditional(counts)] == pytest.approx([0.6, 0.5, 0.3])
    assert [r.n for r in conditional(counts)] == [1000, 600, 300]
    w = wilson(0, 10)
    assert w.lo == 0.0 and w.hi == pytest.approx(0.2775, abs=1e-4)
    w = wilson(50, 100)
    assert w.lo == pytest.approx(0.4038, abs=1e-4) and w.hi == pytest.approx(0.5962, abs=1e-4)


def test_beyond_measured_k_is_flagged_and_holds_the_last_conditional_rate():
    counts = DraftCounts(1000, (600, 300, 90))
    e = tokens_per_step(counts, 5)
    assert e.extrapolated and "last measured conditional rate 0.30" in e.extrapolated[0]
    assert e.mean == pytest.approx(1 + 0.6 + 0.3 + 0.09 + 0.027 + 0.0081)


def test_counts_that_are_not_survival_counters_are_refused():
    with pytest.raises(ValueError, match="position 1"):
        DraftCounts(100, (50, 60))
    with pytest.raises(ValueError, match="negative"):
        DraftCounts(-1, ())
    with pytest.raises(ValueError, match="different k"):
        pooled([DraftCounts(10, (5,)), DraftCounts(10, (5, 2))])
    assert pooled([DraftCounts(10, (5, 2), 20), DraftCounts(30, (9, 3), 50)]) == DraftCounts(
        40, (14, 5), 70
    )


def test_fill_below_one_for_short_drafts():
    assert DraftCounts(100, (50, 20, 5), draft_tokens=240).fill == pytest.approx(0.8)
    assert DraftCounts(100, (50, 20, 5)).fill == 1.0
    assert acceptance_rate(DraftCounts(100, (50, 20, 5), draft_tokens=240)) == pytest.approx(
        75 / 240
    )


# --- step time ---------------------------------------------------------------------------------


def test_step_fit_recovers_a_and_b_from_one_k():
    pts = [StepPoint(4, c, 30 + 0.8 * c * 5) for c in (1, 8, 32)]
    m = fit_step_model(pts)
    assert (m.source, m.a_ms, m.b_ms, m.d_ms) == ("fit", pytest.approx(30), pytest.approx(0.8), 0.0)
    assert m.rel_rms == pytest.approx(0, abs=1e-9)
    assert m.extrapolates(4) is None and "k=4" in (m.extrapolates(2) or "")


def test_step_fit_with_two_k_fits_the_drafter_cost():
    truth = lambda k, c: 25 + 0.5 * c * (k + 1) + 3.0 * k  # noqa: E731
    pts = [StepPoint(k, c, truth(k, c)) for k in (3, 7) for c in (1, 8, 32)]
    m = fit_step_model(pts)
    assert m.source == "fit+k" and m.ks == (3, 7)
    assert (m.a_ms, m.b_ms, m.d_ms) == (pytest.approx(25), pytest.approx(0.5), pytest.approx(3.0))


def test_step_fit_single_point_uses_the_stated_prior():
    m = fit_step_model([StepPoint(7, 1, 185.0)], prior_token_share=0.05)
    assert m.source == "prior" and any("prior" in n for n in m.notes)
    assert m.step_ms(7, 1) == pytest.approx(185.0)
    assert m.b_ms * 8 == pytest.approx(0.05 * 185.0)
    with pytest.raises(ValueError):
        fit_step_model([])


def test_step_fit_falling_with_load_falls_back_to_the_prior():
    m = fit_step_model([StepPoint(3, 1, 200.0), StepPoint(3, 32, 150.0)])
    assert m.source == "prior" and m.b_ms > 0


# --- profile -----------------------------------------------------------------------------------


def test_parse_profile():
    assert parse_profile("c1:0.2,c8:0.5,c32:0.3") == pytest.approx({1: 0.2, 8: 0.5, 32: 0.3})
    assert parse_profile("c1:1, c8:3") == pytest.approx({1: 0.25, 8: 0.75})
    assert parse_profile("4:2") == {4: 1.0}
    for bad in ("", "c1", "c0:1", "cx:1", "c1:-1", "c1:0", "c1:1,c1:2", "c1:nan"):
        with pytest.raises(ValueError):
            parse_profile(bad)


def test_recommend_refuses_a_level_that_was_not_measured():
    levels = _field_levels()
    with pytest.raises(ValueError, match=r"\[2\]"):
        recommend(predict(levels, fit(levels)), {2: 1.0}, k_ref=7)


# --- simulator: scripted acceptance and step costs, every k evaluated ---------------------------

COND = [0.85, 0.75, 0.65, 0.55, 0.45, 0.35, 0.25, 0.15]  # P(position j accepted | before it)
KMAX = 8


def _true_tokens(k: int) -> float:
    return 1 + sum(prod(COND[: j + 1]) for j in range(k))


def _sim_level(c: int, k: int, cost) -> LevelMeasure:
    drafts = 200_000
    counts = DraftCounts(drafts, tuple(round(prod(COND[: j + 1]) * drafts) for j in range(k)))
    step = cost(k, c)
    return LevelMeasure(c, counts, step, c * _true_tokens(k) / (step / 1000))


def _best_by_sweeping_every_k(profile: dict[int, float], cost) -> int:
    def agg(k: int, c: int) -> float:
        return c * _true_tokens(k) / cost(k, c)

    return max(
        range(KMAX + 1), key=lambda k: sum(w * agg(k, c) / agg(KMAX, c) for c, w in profile.items())
    )


@pytest.mark.parametrize(
    ("profile", "expected"),
    [("c1:1", 4), ("c1:0.2,c8:0.5,c32:0.3", 2), ("c32:1", 1)],
)
def test_simulator_recommendation_equals_the_swept_best(profile, expected):
    def cost(k: int, c: int) -> float:
        return 20 + 0.9 * c * (k + 1)

    levels = [_sim_level(c, KMAX, cost) for c in (1, 8, 32)]
    prof = parse_profile(profile)
    best = _best_by_sweeping_every_k(prof, cost)
    assert best == expected  # the three profiles want three different k
    assert recommend(predict(levels, fit(levels)), prof, k_ref=KMAX).k == best


@pytest.mark.parametrize("profile", ["c1:1", "c1:0.2,c8:0.5,c32:0.3", "c32:1"])
def test_simulator_with_drafter_cost_needs_the_history_at_another_k(profile):
    def cost(k: int, c: int) -> float:
        return 20 + 0.5 * c * (k + 1) + 1.5 * k  # a sequential drafter: a cost per position

    levels = [_sim_level(c, KMAX, cost) for c in (1, 8, 32)]
    history = [StepPoint(3, c, cost(3, c)) for c in (1, 8, 32)]  # an earlier run at k=3
    model = fit(levels, history)
    assert model.source == "fit+k" and model.d_ms == pytest.approx(1.5)
    prof = parse_profile(profile)
    rec = recommend(predict(levels, model), prof, k_ref=KMAX)
    assert rec.k == _best_by_sweeping_every_k(prof, cost)
