"""The experiment queue's policy (pure, the time given): the deadline, the costs from the
recorded boots and canaries (their worst), which variants fit before the deadline and which
are skipped and why; and the resume state from a results directory's file names."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest
from tpwarden.cluster.experiment.policy import Costs, costs_from, deadline_of, plan_queue
from tpwarden.cluster.experiment.resume import failure_name, result_name, resume_state

SEOUL = ZoneInfo("Asia/Seoul")
MIN = 60.0


def test_a_clock_time_is_the_next_one_in_its_zone() -> None:
    evening = datetime(2026, 12, 7, 13, 0, tzinfo=UTC)  # 22:00 in Seoul
    at = deadline_of("06:30", SEOUL, evening)
    assert at.astimezone(SEOUL) == datetime(2026, 12, 8, 6, 30, tzinfo=SEOUL)
    morning = datetime(2026, 12, 7, 20, 0, tzinfo=UTC)  # 05:00 the next day in Seoul
    assert deadline_of("06:30", SEOUL, morning).astimezone(SEOUL).day == 8
    assert (deadline_of("06:30", SEOUL, morning) - morning).total_seconds() == 90 * MIN
    assert (deadline_of("+02:00", SEOUL, evening) - evening).total_seconds() == 120 * MIN
    # exactly the deadline's minute: the next day's
    at_six = datetime(2026, 12, 7, 21, 30, tzinfo=UTC)  # 06:30 in Seoul
    assert (deadline_of("06:30", SEOUL, at_six) - at_six).total_seconds() == 24 * 3600


def test_costs_take_the_worst_recorded_boot_and_canary_else_say_what_they_assume() -> None:
    c = costs_from([900.0, 1110.0, 1000.0], [200.0, 240.0], boot_deadline_s=2400.0,
                   bench="quick", eval_preset="gsm8k", eval_limit=100)  # fmt: skip
    assert c.boot_s == 1110.0 and "worst of 3 recorded boots" in c.boot_from
    assert c.canary_s == 240.0 and "worst of 2" in c.canary_from
    assert c.measure_s == 240.0 + 600.0 + 300.0
    none = costs_from([], [], boot_deadline_s=2400.0)
    assert none.boot_s == 2400.0 and "boot deadline" in none.boot_from
    assert "assumed" in none.canary_from and none.measure_s == none.canary_s


COSTS = Costs(boot_s=20 * MIN, boot_from="", canary_s=5 * MIN, canary_from="", margin_s=10 * MIN)
VARIANTS = [("no-drafter", True), ("thinking", False), ("k5", True)]


def test_a_queue_that_fits_runs_request_only_variants_first_on_production() -> None:
    q = plan_queue(VARIANTS, COSTS, now=0.0, deadline=10 * 3600.0)
    assert [(s.name, s.kind) for s in q.steps] == [
        ("production", "production-start"), ("thinking", "request"),
        ("no-drafter", "restart"), ("k5", "restart"), ("production", "production-end"),
    ]  # fmt: skip
    assert q.fits and q.verdict() == "fits" and not q.skipped
    # 5 (production) + 5 (thinking) + 25 + 25 (boot and canary each) + 25 (restore and canary)
    assert q.finish == 85 * MIN and q.whole_s == 85 * MIN
    starts = [s.start for s in q.steps]
    assert starts == [0.0, 5 * MIN, 10 * MIN, 35 * MIN, 60 * MIN]


def test_a_variant_that_does_not_fit_is_skipped_with_the_numbers_and_a_cheaper_one_runs() -> None:
    # 60 minutes: production 5, one restart variant 25 + restore 25 + margin 10 = 65: none fits
    # as a restart; the request-only one (5, then the closing canary 5) does
    q = plan_queue(VARIANTS, COSTS, now=0.0, deadline=60 * MIN)
    kinds = {s.name: s for s in q.steps}
    assert kinds["thinking"].skipped is None
    assert kinds["no-drafter"].skipped and kinds["k5"].skipped
    assert "needs 25.0 min + 25.0 min to restore" in (kinds["no-drafter"].skipped or "")
    assert q.verdict() == "partial" and not q.fits
    assert q.steps[-1].estimate_s == 5 * MIN  # nothing restarted: no restore owed
    assert q.finish + COSTS.margin_s <= q.deadline


def test_the_restore_is_owed_from_the_first_restart_on() -> None:
    # room for exactly one restart variant and the restore: the second is skipped
    q = plan_queue([("a", True), ("b", True)], COSTS, now=0.0, deadline=70 * MIN)
    assert [s.skipped is None for s in q.steps] == [True, True, False, True]
    assert q.finish == 55 * MIN and q.finish + COSTS.margin_s <= q.deadline
    assert q.steps[-1].estimate_s == COSTS.boot_s + COSTS.canary_s


def test_a_resumed_queue_does_not_measure_production_again_at_the_start() -> None:
    q = plan_queue(VARIANTS, COSTS, now=0.0, deadline=10 * 3600.0, measured=True)
    assert [s.kind for s in q.steps] == ["request", "restart", "restart", "production-end"]
    assert q.steps[0].start == 0.0 and q.finish == 80 * MIN


def test_a_deadline_already_too_close_runs_nothing() -> None:
    q = plan_queue(VARIANTS, COSTS, now=0.0, deadline=12 * MIN)
    assert q.verdict() == "nothing fits" and len(q.skipped) == 3


def test_resume_state_from_the_results_directory() -> None:
    order = ["thinking", "no-drafter", "k5", "k7"]
    files = [result_name("thinking"), failure_name("no-drafter"), result_name("k5"),
             failure_name("k5"), ".thinking.result.json.tmp123", result_name("old-one"),
             result_name("production-start"), "notes.txt"]  # fmt: skip
    state = resume_state(order, files)
    assert state.done == ("thinking", "k5")  # a result wins over a failure of the same name
    assert state.failed == ("no-drafter",)  # recorded, not tried again
    assert state.left == ("k7",)
    assert state.foreign == ("old-one",)
    assert not state.finished
    assert resume_state(order, []).left == tuple(order)
    assert resume_state(["a"], [result_name("a")]).finished


@pytest.mark.parametrize("relative", ["+00:30", "+8:00"])
def test_a_relative_deadline_is_from_now(relative: str) -> None:
    now = datetime(2026, 12, 7, 13, 0, tzinfo=UTC)
    hours, minutes = relative[1:].split(":")
    want = int(hours) * 3600 + int(minutes) * 60
    assert (deadline_of(relative, SEOUL, now) - now).total_seconds() == want
