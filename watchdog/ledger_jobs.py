"""The watchdog's ledger jobs (issue 53): the record after each of its own restarts, and the
canaries, on APScheduler 3 beside the daily report (`daily.py` says why APScheduler for times of
day in a zone).

* `healthy(restart_seq)`: the daemon saw the server healthy again after a restart it made: a
  ledger record (`ledger.record.record_healthy`, action "watchdog_restart"), in a thread of its
  own (it reads every node over SSH; the probe loop never waits for it).
* Canaries: one job per quiet hour (`tpwarden.ledger.canary.quiet_hours` in `tz`, trigger
  "schedule"), and with `after_change` a check every `CHECK_S` whether the latest record's
  configuration has no completed canary yet (trigger "change"; a deferred one is tried again
  `RETRY_S` later). One canary at a time; each writes the
  canary lease in this watchdog's state dir first, so the tick sees its load as the canary's
  (`canary_lease`), and is deferred by users' load (`bench.canary`).
* After a canary, the gauges `tpwarden_ledger_canary_ratio`, `tpwarden_ledger_slowdown` and
  `tpwarden_ledger_canary_last_timestamp_seconds` are set from `ledger.why.slowdown`, and the
  event `canary` goes to the watchdog's event log (through `post`, under the tick lock).

The cluster side is `ControllerLedger` (cluster control, the canary runner, the store); tests
inject their own `LedgerActions`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC
from typing import Protocol

from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.schedulers.base import BaseScheduler
from apscheduler.triggers.interval import IntervalTrigger
from tpwarden.cluster.bench.canary import CanaryRunner, Lease
from tpwarden.cluster.canary_lease import (
    cleared_document,
    lease_document,
    lease_path,
    write_lease,
)
from tpwarden.cluster.control.controller import Controller
from tpwarden.cluster.durable import JSONObject
from tpwarden.cluster.ledger.record import ledger_file, record_healthy
from tpwarden.cluster.ledger.store import Ledger
from tpwarden.cluster.ledger.why import slowdown
from tpwarden.cluster.report_settings import clock_time, zone
from tpwarden.watchdog.daily import DailyTrigger
from tpwarden.watchdog.exporter import WatchdogMetrics

log = logging.getLogger(__name__)

CHECK_S = 300.0  # how often a canary after a change is looked for
RETRY_S = 1800.0  # a deferred canary after a change is tried again this much later
MISFIRE_GRACE_S = 1800
Post = Callable[[str, JSONObject], None]


class LedgerActions(Protocol):
    def record(self, reason: str) -> JSONObject: ...
    def canary(self, trigger: str) -> JSONObject: ...
    def canary_due(self) -> bool: ...
    def slowdowns(self) -> list[JSONObject]: ...


@dataclass(frozen=True)
class CanarySchedule:
    quiet_hours: tuple[str, ...] = ()
    tz: str = "UTC"
    after_change: bool = True
    levels: tuple[int, ...] = (1,)


class LedgerJobs:
    """Starts nothing when built; `start(post)` schedules, `shutdown()` ends."""

    def __init__(
        self,
        actions: LedgerActions,
        schedule: CanarySchedule,
        metrics: WatchdogMetrics | None = None,
        scheduler: BaseScheduler | None = None,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.actions = actions
        self.schedule = schedule
        self.metrics = metrics
        self._scheduler = scheduler or BackgroundScheduler(daemon=True, timezone=UTC)
        self._wall = wall
        self._post: Post = lambda event, fields: None
        self._one = threading.Lock()  # one canary at a time
        self.recorded_seq: int | None = None  # the restart last recorded (set at daemon start)

    def start(self, post: Post) -> None:
        self._post = post
        tz = zone(self.schedule.tz)
        for at in self.schedule.quiet_hours:
            hour, minute = clock_time(at)
            self._scheduler.add_job(
                self.fire, DailyTrigger(hour, minute, tz), args=("schedule",),
                id=f"canary-{at}", replace_existing=True, coalesce=True, max_instances=1,
                misfire_grace_time=MISFIRE_GRACE_S,
            )  # fmt: skip
        if self.schedule.after_change:
            self._scheduler.add_job(
                self.fire_if_due, IntervalTrigger(seconds=CHECK_S), id="canary-after-change",
                replace_existing=True, coalesce=True, max_instances=1,
            )  # fmt: skip
        if self._scheduler.get_jobs() and not self._scheduler.running:
            self._scheduler.start()

    def healthy(self, restart_seq: int, reason: str, wait: bool = False) -> None:
        """The server is healthy again after the watchdog's restart `restart_seq`: record it
        once (a background thread; `wait` for tests)."""
        if self.recorded_seq == restart_seq:
            return
        self.recorded_seq = restart_seq
        t = threading.Thread(target=self._record, args=(reason,), daemon=True)
        t.start()
        if wait:
            t.join()

    def _record(self, reason: str) -> None:
        try:
            doc = self.actions.record(reason)
        except Exception as exc:  # noqa: BLE001 - the ledger never stops the watchdog
            doc = {"error": f"{type(exc).__name__}: {exc}"}
        self._post("ledger_record", doc)

    def fire_if_due(self) -> None:
        try:
            due = self.actions.canary_due()
        except Exception as exc:  # noqa: BLE001
            log.warning("ledger: cannot tell whether a canary is due: %s", exc)
            return
        if due:
            self.fire("change")

    def fire(self, trigger: str) -> JSONObject | None:
        """One canary now (the jobs' body; None when another one is running)."""
        if not self._one.acquire(blocking=False):
            return None
        try:
            try:
                doc = self.actions.canary(trigger)
            except Exception as exc:  # noqa: BLE001 - reported as a failed canary event
                doc = {"status": "failed", "reason": f"{type(exc).__name__}: {exc}"}
            self._post("canary", doc)
            self.show()
            if self.metrics is not None:
                self.metrics.canary_last.labels(str(doc.get("status"))).set(self._wall())
            return doc
        finally:
            self._one.release()

    def show(self) -> None:
        """Set the ledger gauges from the ledger as it is now."""
        if self.metrics is None:
            return
        try:
            for s in self.actions.slowdowns():
                level = str(s.get("level"))
                if s.get("ratio") is not None:
                    self.metrics.canary_ratio.labels(level).set(float(s["ratio"]))
                self.metrics.slowdown.labels(level).set(1 if s.get("confirmed") else 0)
        except Exception as exc:  # noqa: BLE001
            log.warning("ledger: gauges not set: %s", exc)

    def follow(self, actuator: object, state_dir: str) -> None:
        """A newly applied plan: the canaries run against its controller from now on."""
        actions = _actions_of(actuator, state_dir)
        if actions is not None:
            self.actions = actions

    def nudge(self) -> None:
        if self._scheduler.running:
            self._scheduler.wakeup()

    def shutdown(self) -> None:
        if self._scheduler.running:
            self._scheduler.shutdown(wait=False)


class LocalLease(Lease):
    """The lease in this watchdog's own state directory (it reads it every tick)."""

    def __init__(self, state_dir: str, by: str = "tpwarden-watchdog") -> None:
        self.path = lease_path(state_dir)
        self.by = by

    def begin(self, run_id: str, levels: tuple[int, ...], until: float) -> None:
        doc = lease_document(run_id=run_id, levels=levels, until=until, by=self.by, now=time.time())
        write_lease(self.path, doc)

    def end(self, run_id: str) -> None:
        write_lease(self.path, cleared_document(run_id=run_id, now=time.time()))


class ControllerLedger:
    """`LedgerActions` over cluster control: the controller the actuator holds."""

    def __init__(self, ctl: Controller, watchdog_state_dir: str) -> None:
        self.ctl = ctl
        self.state_dir = watchdog_state_dir

    @property
    def path(self) -> str:
        return str(ledger_file(self.ctl.spec, self.ctl.state_dir))

    def record(self, reason: str) -> JSONObject:
        out = record_healthy(self.ctl, action="watchdog_restart", reason=reason,
                             who="tpwarden-watchdog")  # fmt: skip
        return out.to_json()

    def canary(self, trigger: str) -> JSONObject:
        runner = CanaryRunner(self.ctl, trigger=trigger, lease=LocalLease(self.state_dir))
        return runner.run().to_json()

    def canary_due(self, now: float | None = None) -> bool:
        """The latest record's configuration has no completed canary since it, and none was
        tried in the last `RETRY_S` (a deferred one is tried again then, not at once)."""
        now = time.time() if now is None else now
        try:
            led = Ledger.open(self.path, readonly=True)
        except Exception:  # noqa: BLE001 - no ledger yet: nothing recorded, nothing due
            return False
        with led:
            rec = led.latest_record(self.ctl.spec.name)
            if rec is None:
                return False
            since = [c for c in led.canaries(self.ctl.spec.name, limit=50) if c.started >= rec.ts]
        if any(c.status == "ok" for c in since):
            return False
        return not since or now - max(c.started for c in since) >= RETRY_S

    def slowdowns(self) -> list[JSONObject]:
        try:
            led = Ledger.open(self.path, readonly=True)
        except Exception:  # noqa: BLE001
            return []
        with led:
            levels = self.ctl.spec.settings.ledger.canary.levels
            return [
                {"level": s.level, "ratio": s.ratio, "verdict": s.verdict.value,
                 "confirmed": s.confirmed}
                for s in (slowdown(led, self.ctl.spec.name, lv) for lv in levels)
            ]  # fmt: skip


def _actions_of(actuator: object, state_dir: str) -> ControllerLedger | None:
    ctl = getattr(actuator, "controller", None)
    return ControllerLedger(ctl, state_dir) if isinstance(ctl, Controller) else None


def ledger_jobs(
    actuator: object, state_dir: str, metrics: WatchdogMetrics | None
) -> LedgerJobs | None:
    """The production wiring: the actuator's controller and the spec's canary schedule; None
    for an actuator without cluster control (tests)."""
    actions = _actions_of(actuator, state_dir)
    if actions is None:
        return None
    c = actions.ctl.spec.settings.ledger.canary
    schedule = CanarySchedule(tuple(c.quiet_hours), c.tz, c.after_change, tuple(c.levels))
    return LedgerJobs(actions, schedule, metrics)
