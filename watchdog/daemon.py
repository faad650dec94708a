"""The watchdog loop: `tick()` = one probe -> policy -> apply decisions, on a `Cadence`.

Constructors start nothing. `open()` takes the state-dir lock and recovers persisted state (a
restart interrupted by kill -9 is not repeated, only verified in boot grace); `tick()` opens on
first use; `start()` (background) or `run()` (blocking) run ticks every interval (monotonic,
start to start); `stop()` ends them.

Ordering that makes kill -9 safe: the policy state with `restart_in_progress` is saved (atomic
rename) BEFORE the actuator is called and cleared after it returns; every event is fsynced.

The I/O is composed, not mixed in: `files` (a `DaemonFiles`: events, state, outbox, hold) and
`restarts` (a `RestartPath`) are collaborators built here with exactly what they use; following
a newly applied plan is read by a `PlanFollower` and switched here, where the state it changes
lives.

Never blind, never silent: decisions are applied even when `state.json` or `events.jsonl` cannot
be written (full disk): the write error is counted on /metrics and alerted, and alerts that could
not be delivered are retried with backoff (`Outbox`) until they are. Calls into the cluster
(boot progress, start time, evidence) are bounded, so a frozen head costs one bounded wait.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from tpwarden.cluster.durable import JSONObject
from tpwarden.cluster.event_log import EventLog
from tpwarden.cluster.operator_lock import FileLock, lock_holder
from tpwarden.cluster.vllm.probe import Outcome, Prober
from tpwarden.watchdog.alert import Alerter, Outbox
from tpwarden.watchdog.collaborators import Actuator as Actuator
from tpwarden.watchdog.collaborators import PlanChange as PlanChange
from tpwarden.watchdog.collaborators import Prober as ProberLike
from tpwarden.watchdog.config import WatchdogConfig, config_changes
from tpwarden.watchdog.daemon_io import DaemonFiles, PlanFollower
from tpwarden.watchdog.daemon_restart import RestartPath
from tpwarden.watchdog.daily import DailyReport
from tpwarden.watchdog.exporter import WatchdogMetrics
from tpwarden.watchdog.ledger_jobs import LedgerJobs, ledger_jobs
from tpwarden.watchdog.morning_delivery import morning_payload
from tpwarden.watchdog.observation import BootReading, Observation
from tpwarden.watchdog.policy import Policy
from tpwarden.watchdog.policy_state import (
    Alert,
    AlertCategory,
    Decision,
    PolicyConfig,
    PolicyState,
    Restart,
    WatchdogPhase,
    decision_name,
)
from tpwarden.watchdog.runtime import Cadence, SteadyClock, bounded
from tpwarden.watchdog.state import StateStore

log = logging.getLogger(__name__)

T = TypeVar("T")

REPORT_EVENT_FIELDS = ("incident_id", "headline", "window", "missing")
TICK_ERRORS_ALERT = 3  # this many failed ticks in a row -> one alert (category tick_errors)


class Watchdog:
    def __init__(
        self,
        config: WatchdogConfig,
        prober: ProberLike,
        actuator: Actuator,
        clock: Callable[[], float],
        state_store: StateStore,
        event_log: EventLog,
        alerter: Alerter,
        metrics: WatchdogMetrics | None = None,
        policy: Policy | None = None,
        follow: Callable[[], PlanChange | None] | None = None,
        daily: DailyReport | None = None,
        restart_lock: FileLock | None = None,
        ledger: LedgerJobs | None = None,
    ) -> None:
        self.config = config
        self._prober = prober
        self._actuator = actuator
        self._clock = clock
        self._alerter = alerter
        self._metrics = metrics
        self._policy = policy or Policy(PolicyConfig.from_config(config))
        self._daily = daily  # the morning report's daily delivery (its own scheduler thread)
        self._ledger = ledger  # the ledger's jobs (issue 53): records after restarts, canaries
        self._lock = FileLock(config.lock_path)
        self._state: PolicyState | None = None
        self._cadence: Cadence | None = None
        self._tick_lock = threading.Lock()
        self._outbox = Outbox(alerter, max_retry_s=config.alert_retry_max_s)
        self.files = DaemonFiles(
            lambda: self.config, event_log, state_store, self._outbox, clock, metrics
        )
        # `follow` returns a PlanChange when the applied plan's hash changed
        self._follower = PlanFollower(follow, self.files) if follow is not None else None
        self._failed_ticks = 0  # consecutive ticks that raised
        self._wall: Callable[[], float] = time.time  # /metrics timestamps (Prometheus time())
        # A call into the cluster (boot progress, evidence) waits at most this long per tick.
        self.cluster_call_timeout_s = max(1.0, min(30.0, config.interval_s / 2))
        # Evidence is read once, just before a restart that takes minutes, and its own reads
        # carry their own timeouts (SSH 5 s per node in parallel, /metrics 5 s): the bound must
        # hold them, or a short probe interval records only a timeout in place of the evidence.
        self.restarts = RestartPath(
            self.files,
            clock,
            self._cluster_call,
            config.state_dir,
            evidence_timeout_s=max(self.cluster_call_timeout_s, 20.0),
            metrics=metrics,
            # the cluster-wide restart lock (default: the config's path, if any)
            restart_lock=restart_lock
            or (FileLock(config.restart_lock_path) if config.restart_lock_path else None),
        )

    @property
    def state(self) -> PolicyState | None:
        return self._state

    @property
    def evidence_timeout_s(self) -> float:
        """The bound of the evidence read just before a restart (the restart path's)."""
        return self.restarts.evidence_timeout_s

    @evidence_timeout_s.setter
    def evidence_timeout_s(self, value: float) -> None:
        self.restarts.evidence_timeout_s = value

    @property
    def dossier_timeout_s(self) -> float:
        """The bound of one incident-dossier call (the restart path's)."""
        return self.restarts.dossier_timeout_s

    @dossier_timeout_s.setter
    def dossier_timeout_s(self, value: float) -> None:
        self.restarts.dossier_timeout_s = value

    # -- life cycle --------------------------------------------------------------------------
    def open(self) -> None:
        """Take the state-dir lock (or raise WatchdogLocked) and recover the persisted state."""
        if self._state is not None:
            return
        self._lock.acquire(f"probe_url={self.config.probe_url}")
        loaded = self.files.store.load()
        self.files.load_outbox()
        now = self._clock()
        state, decisions = self._policy.on_startup(loaded, now)
        if self._ledger is not None:  # restarts made before this daemon are not recorded again
            self._ledger.recorded_seq = state.restart_seq
        self.files.record(
            "daemon_start", pid=os.getpid(), phase=state.phase.value, recovered=loaded is not None
        )
        for aside, error in self.files.store.quarantined:
            self.files.file_invalid("state", self.config.state_path, aside, error)
        if loaded is not None and loaded.restart_in_progress:
            self.files.record(
                "restart_interrupted",
                restart_id=loaded.restart_in_progress,
                note="found restart_in_progress at start: not restarting again; "
                "verifying in boot grace",
            )
        self._commit(state, decisions)

    def close(self) -> None:
        if self._daily is not None:
            self._daily.shutdown()  # first: a delivery waiting for the tick lock then finds us closed
        if self._ledger is not None:
            self._ledger.shutdown()
        with self._tick_lock:
            if self._lock.held:
                self.files.record("daemon_stop", pid=os.getpid())
                self._lock.release()
            self.files.events.close()
            if self._metrics is not None:
                self._metrics.close()
            self._prober.close()

    def start(self) -> None:
        """Run ticks on a background thread; returns at once. Pair with `stop()`."""
        self._prepare().start()

    def run(self) -> None:
        """Run ticks on this thread until `stop()` (e.g. from a signal handler)."""
        try:
            self._prepare().run()
        finally:
            self.close()

    def stop(self) -> None:
        cadence, self._cadence = self._cadence, None
        if cadence is not None:
            background = cadence._thread is not None
            cadence.stop()
            if background:
                self.close()

    def _prepare(self) -> Cadence:
        self.open()
        if self._metrics is not None:
            self._metrics.last_probe.set(self._wall())  # the clock of the probes-stopped alert
            self._metrics.serve(self.config.metrics_host, self.config.metrics_port)
        if self._daily is not None:
            try:
                self._daily.start(self.config.report, self._post_report)
            except Exception as exc:  # noqa: BLE001 - the report never keeps the watchdog down
                self.files.seam_error("report", exc)
        if self._ledger is not None:
            self._ledger.start(self._post_ledger)
        self._cadence = Cadence(self._safe_tick, self.config.interval_s)
        return self._cadence

    def _safe_tick(self) -> None:
        """One tick that never raises. Ticks that fail in a row (a prober that raises sees
        nothing, decides nothing) are alerted once at TICK_ERRORS_ALERT, not only counted."""
        try:
            self.tick()
        except Exception as exc:  # the loop must survive anything one tick does
            log.exception("watchdog tick failed")
            self.files.seam_error("tick", exc)
            self._failed_ticks += 1
            if self._failed_ticks == TICK_ERRORS_ALERT:
                self.files.queue_alert(
                    {
                        "incident_id": "tick-errors",
                        "category": AlertCategory.TICK_ERRORS,
                        "message": f"{self._failed_ticks} watchdog ticks failed in a row (last: "
                        f"{type(exc).__name__}: {exc}); hangs are not judged until they pass",
                    }
                )
        else:
            self._failed_ticks = 0

    def _post_report(self, payload: JSONObject) -> None:
        """The daily report's job hands its payload here (from the scheduler's thread): queued
        and sent like an alert, under the tick lock, so the event log and the outbox have one
        writer at a time and an undelivered report is retried with the alerts."""
        with self._tick_lock:
            if not self._lock.held:
                return  # closed while the report was being built
            self.files.record("morning_report", **{k: payload.get(k) for k in REPORT_EVENT_FIELDS})
            self.files.queue_alert(payload)

    def _post_ledger(self, event: str, fields: JSONObject) -> None:
        """A ledger job's result into the event log, under the tick lock (one writer)."""
        with self._tick_lock:
            if self._lock.held:
                self.files.record(event, **fields)

    # -- one tick ----------------------------------------------------------------------------
    def tick(self) -> list[Decision]:
        """One probe, one policy decision, decisions applied. Returns the decisions."""
        with self._tick_lock:
            self.open()
            self.restarts.reap()
            self._follow_plan()
            if self._daily is not None:
                self._daily.nudge()  # the report's scheduler re-reads the wall clock
            assert self._state is not None
            probe = self._prober.probe()
            if self._metrics is not None:
                self._metrics.last_probe.set(self._wall())
            metrics = None if probe.outcome is Outcome.REFUSED else self._prober.scrape_metrics()
            boot = self._boot_progress() if self._state.phase is WatchdogPhase.BOOTING else None
            hold, released_at = self.files.read_hold()
            canary = self.files.read_canary(self._wall())  # ledger (issue 53): canary load
            obs = Observation(probe, metrics, boot, hold, released_at, canary)
            now = self._clock()
            state, decisions = self._policy.decide(self._state, obs, now)
            self.files.record(
                "probe",
                **probe.to_json(),
                verdict=state.last_verdict,
                phase=state.phase.value,
                failures=state.consecutive_failures,
                metrics=metrics.to_json() if metrics else None,
                boot_progress=dataclasses.asdict(boot) if boot else None,
            )
            if self._metrics is not None:
                m = self._metrics
                m.probe_latency.observe(probe.latency_s)
                m.probe_total.labels(probe.outcome.value).inc()
                m.verdict_total.labels(state.last_verdict or "unknown").inc()
            self._commit(state, decisions, hold_until=hold.until if hold else None)
            self.files.flush_alerts()
            return decisions

    def _cluster_call(self, fn: Callable[[], T], what: str, timeout_s: float | None = None) -> T:
        """A bounded call into the cluster: a frozen node costs this one wait, not the loop."""
        return bounded(fn, timeout_s or self.cluster_call_timeout_s, what)

    def _boot_progress(self) -> BootReading | None:
        if self._restart_elsewhere():
            # Another watchdog (or an operator's restart) holds the cluster restart lock: the
            # containers it stops and starts are its restart, not a failed boot of ours.
            return None
        try:
            reading = self._cluster_call(self._actuator.boot_progress, "boot")
            return reading if isinstance(reading, BootReading) else None
        except Exception as exc:
            log.warning("boot_progress() failed: %s", exc)
            return None

    def _restart_elsewhere(self) -> bool:
        lock = self.restarts.restart_lock
        return lock is not None and not lock.held and lock_holder(lock.path) is not None

    def _commit(
        self, state: PolicyState, decisions: list[Decision], hold_until: float | None = None
    ) -> None:
        """Persist first, then record and apply the decisions."""
        prev = self._state
        self._state = state
        self.files.save(state)
        if prev is not None and prev.phase is not state.phase:
            self.files.record("transition", old=prev.phase.value, new=state.phase.value)
            # Healthy after its own restart: the restart operation (`operations.control`)
            # does not wait for the boot here, so the ledger's record is the daemon's, once
            # per restart_seq (an operator's restart records itself and moves no restart_seq).
            booted = prev.phase is WatchdogPhase.BOOTING and state.phase is WatchdogPhase.READY
            if self._ledger is not None and booted:
                self._ledger.healthy(
                    state.restart_seq, f"healthy after restart r{state.restart_seq}"
                )
        if self._metrics is not None:
            self._metrics.show_state(state, self.config, self._clock(), hold_until)
        for d in decisions:
            if not isinstance(d, Restart):
                self.files.record("decision", decision=decision_name(d), **dataclasses.asdict(d))
            if isinstance(d, Alert):
                try:
                    self._send_alert(d, state)
                except Exception as exc:  # noqa: BLE001 - an alert never stops a decision
                    self.files.seam_error("alerter", exc)
            elif isinstance(d, Restart):
                self._restart(d)

    def _restart(self, d: Restart) -> None:
        """The restart path runs; its result (ok, failed or skipped) always goes to the policy."""
        assert self._state is not None
        done = self.restarts.run(d, self._actuator, self.config, self._state)
        state, more = self._policy.on_restart_result(
            self._state, self._clock(), ok=done.ok, error=done.error, skipped=done.skipped
        )
        self._commit(state, more)

    def _follow_plan(self) -> None:
        """Switch probe target, key and policy to a newly applied plan (logged as an event).
        A plan that cannot be used is reported by the follower, and the previous one kept."""
        got = self._follower.poll(self.config) if self._follower is not None else None
        if got is None:
            return
        change, new = got
        old, self.config = self.config, new
        self._prober.close()
        self._actuator.close()
        self._prober, self._actuator = change.prober, change.actuator
        if self._ledger is not None:
            self._ledger.follow(change.actuator, new.state_dir)
        self._policy = Policy(PolicyConfig.from_config(new))
        if self._cadence is not None:
            self._cadence.interval_s = new.interval_s
        if self._daily is not None:
            try:
                self._daily.apply(new.report)  # a moved delivery time takes effect now
            except Exception as exc:  # noqa: BLE001 - the plan is followed all the same
                self.files.seam_error("report", exc)
        assert self._state is not None
        self._state = dataclasses.replace(self._state, baseline=None, flat_since=None)
        self.files.record(
            "plan_changed",
            old_hash=old.config_hash,
            new_hash=new.config_hash,
            probe_url=new.probe_url,
            changes=config_changes(old, new),
            **change.detail,
        )

    def _send_alert(self, a: Alert, state: PolicyState) -> None:
        self.files.queue_alert(
            {
                "incident_id": a.incident_id,
                "category": a.category,
                "message": a.message,
                "phase": state.phase.value,
                "consecutive_failures": state.consecutive_failures,
                "last_probe": state.last_probe,
                "failures": list(state.failure_log),
                "events_path": self.files.events.path,
            }
            | self.restarts.dossier_fields(a.incident_id)
        )


def build_watchdog(
    config: WatchdogConfig,
    actuator: Actuator,
    clock: Callable[[], float] | None = None,
    follow: Callable[[], PlanChange | None] | None = None,
) -> Watchdog:
    """The production wiring: real prober, files under `state_dir`, hooks from the config."""
    clock = clock or SteadyClock(time.time, time.monotonic)
    metrics = WatchdogMetrics()
    return Watchdog(
        config=config,
        prober=Prober(config),
        actuator=actuator,
        clock=clock,
        state_store=StateStore(config.state_path),
        event_log=EventLog(config.events_path, clock, max_bytes=config.events_max_bytes),
        alerter=Alerter(
            config.alert_command,
            config.alert_webhook,
            webhook_format=config.alert_webhook_format,
        ),
        metrics=metrics,
        follow=follow,
        daily=DailyReport(lambda report, now: morning_payload(report, config.events_path, now)),
        ledger=ledger_jobs(actuator, config.state_dir, metrics),
    )
