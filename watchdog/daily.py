"""The daily delivery of the morning report, on APScheduler 3 (issue 31 item 6).

Why APScheduler here and not the probe's `Cadence`: "07:30 in Asia/Seoul, every day" is a
wall-clock time in a zone, with its DST days (a 02:30 that does not exist, a 01:30 that happens
twice), which is what APScheduler's `CronTrigger` computes (`DailyTrigger` guards one of its
DST defects); the probe cadence is the opposite, a monotonic start-to-start interval that a
wall-clock scheduler cannot keep (runtime.py says why).

The scheduler is a `BackgroundScheduler` (its own thread), so the report goes out at its minute
rather than at the next probe tick (up to `interval_s` later, two minutes by default). Its job
only hands a payload to the daemon (`post`), which queues it in the alert outbox under the tick
lock: one writer of the event log and the outbox at a time, and an undelivered report is
retried like any alert. `nudge()` (called every tick) makes the scheduler read the wall clock
again: it sleeps with a timeout computed from wall time, so after an NTP step forward it would
otherwise wake late by the step.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from datetime import time as dtime
from zoneinfo import ZoneInfo

from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.schedulers.base import BaseScheduler
from apscheduler.triggers.base import BaseTrigger
from apscheduler.triggers.cron import CronTrigger
from tpwarden.cluster.durable import JSONObject
from tpwarden.cluster.report_settings import clock_time, zone
from tpwarden.watchdog.config import ReportConfig
from tpwarden.watchdog.policy_state import AlertCategory

log = logging.getLogger(__name__)

JOB_ID = "morning-report"
# A delivery whose minute passed while the scheduler could not run (host suspended, wall clock
# stepped) still goes out within this long; later than that it waits for the next day.
MISFIRE_GRACE_S = 3600

Builder = Callable[[ReportConfig, float], JSONObject]


class DailyTrigger(BaseTrigger):  # type: ignore[misc]  # APScheduler 3 ships no types
    """Every day at one local time, at most once per local date: APScheduler's `CronTrigger`
    with one guard. On a fall-back day whose repeated hour holds the time (01:30 in New York on
    the first Sunday of November) CronTrigger 3.11.3 fires twice and then answers that second
    time forever (agronholm/apscheduler#1021, open for 3.11), which spins the scheduler's
    `_get_run_times` loop; here the fire after one on date D is the first one after D."""

    def __init__(self, hour: int, minute: int, tz: ZoneInfo) -> None:
        self.timezone = tz
        self.cron = CronTrigger(hour=hour, minute=minute, second=0, timezone=tz)

    def get_next_fire_time(
        self, previous_fire_time: datetime | None, now: datetime
    ) -> datetime | None:
        nxt: datetime | None = self.cron.get_next_fire_time(previous_fire_time, now)
        if previous_fire_time is None or nxt is None:
            return nxt
        last_day = previous_fire_time.astimezone(self.timezone).date()
        if nxt.astimezone(self.timezone).date() <= last_day:
            midnight = datetime.combine(last_day + timedelta(days=1), dtime(0), self.timezone)
            nxt = self.cron.get_next_fire_time(None, max(now, midnight))
        return nxt

    def __str__(self) -> str:
        return f"daily[{self.cron}]"


def daily_trigger(report: ReportConfig) -> DailyTrigger:
    """Every day at `deliver_at` in `tz` (validated with the settings; ValueError otherwise)."""
    hour, minute = clock_time(report.deliver_at)
    return DailyTrigger(hour, minute, zone(report.tz))


class DailyReport:
    """One scheduler, one cron job: `build(report, now)` then `post(payload)`. Starts nothing
    when built; `start()` schedules (when a report is configured), `apply()` follows a new plan,
    `shutdown()` ends it. The scheduler is injectable (tests pass their own)."""

    def __init__(
        self,
        build: Builder,
        scheduler: BaseScheduler | None = None,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._build = build
        # its own zone only sets job defaults (each trigger has its zone); UTC spares a tzlocal
        # lookup on hosts without a configured local zone
        self._scheduler = scheduler or BackgroundScheduler(daemon=True, timezone=UTC)
        self._wall = wall
        self._post: Callable[[JSONObject], None] | None = None
        self.report: ReportConfig | None = None

    def start(self, report: ReportConfig | None, post: Callable[[JSONObject], None]) -> None:
        self._post = post
        self.apply(report)

    def apply(self, report: ReportConfig | None) -> None:
        """Schedule the delivery `report` asks for (None: no delivery). The scheduler's thread
        starts with the first delivery configured, never before `start()`."""
        if self._post is None:
            return  # not started: start() applies the report it is given
        if report == self.report and (report is None or self._scheduler.get_job(JOB_ID)):
            return
        self.report = report
        if report is None:
            if self._scheduler.get_job(JOB_ID) is not None:
                self._scheduler.remove_job(JOB_ID)
            return
        self._scheduler.add_job(
            self.fire,
            daily_trigger(report),
            id=JOB_ID,
            replace_existing=True,
            coalesce=True,  # missed days (a suspended host) are one delivery, not several
            max_instances=1,  # a daily job: a run still going at the next day's minute is a bug
            misfire_grace_time=MISFIRE_GRACE_S,
        )
        if not self._scheduler.running:
            self._scheduler.start()

    def fire(self) -> None:
        """The job: build the report of the window ending now and hand it to the daemon. A
        report that cannot be built is delivered as a notice saying why (never silent)."""
        report, post = self.report, self._post
        if report is None or post is None:
            return
        now = self._wall()
        try:
            payload = self._build(report, now)
        except Exception as exc:  # noqa: BLE001 - reported through the same hooks
            log.exception("morning report could not be built")
            payload = {
                "incident_id": f"morning-report-{int(now)}",
                "category": AlertCategory.MORNING_REPORT,
                "message": f"the morning report could not be built: {type(exc).__name__}: {exc}",
            }
        post(payload)

    def next_fire(self) -> datetime | None:
        job = self._scheduler.get_job(JOB_ID)
        at: datetime | None = job.next_run_time if job is not None else None
        return at

    def bring_forward(self, at: datetime) -> None:
        """Make the next delivery fire at `at` (a scaled wait for tests and the bench); the
        days after keep their cron time."""
        self._scheduler.modify_job(JOB_ID, next_run_time=at)
        self.nudge()

    def nudge(self) -> None:
        """Make the scheduler look at the wall clock now (cheap; called every tick)."""
        if self._scheduler.running:
            self._scheduler.wakeup()

    def shutdown(self) -> None:
        if self._scheduler.running:
            self._scheduler.shutdown(wait=False)
