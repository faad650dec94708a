"""The daemon's side effects that must never stop a decision: event and state writes on a
full disk (counted, exported, alerted), alert delivery with retries (`Outbox`), and following a
newly applied plan. A mixin of `Watchdog` (tpwarden.watchdog.daemon), kept apart for size.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable

from tpwarden.cluster.durable import JSONObject, JSONValue, atomic_write_json, read_json
from tpwarden.cluster.event_log import EventLog
from tpwarden.cluster.hold import OperatorHold, load_hold
from tpwarden.watchdog.alert import Outbox
from tpwarden.watchdog.collaborators import Actuator, PlanChange, Prober
from tpwarden.watchdog.config import WatchdogConfig, config_changes
from tpwarden.watchdog.daily import DailyReport
from tpwarden.watchdog.exporter import WatchdogMetrics
from tpwarden.watchdog.policy import Policy
from tpwarden.watchdog.policy_state import PolicyConfig, PolicyState
from tpwarden.watchdog.runtime import Cadence
from tpwarden.watchdog.state import StateStore

log = logging.getLogger("tpwarden.watchdog.daemon")


class DaemonIO:
    """Needs from the host class: config, _events, _store, _metrics, _outbox, _clock,
    _broken_writes, _follow, _follow_error, _prober, _actuator, _policy, _state, _cadence,
    _daily."""

    _events: EventLog
    _store: StateStore
    _metrics: WatchdogMetrics | None
    _outbox: Outbox
    _clock: Callable[[], float]
    _broken_writes: set[str]
    _follow: Callable[[], PlanChange | None] | None
    _follow_error: str | None
    _hold_error: str | None = None
    _prober: Prober
    _actuator: Actuator
    _policy: Policy
    _state: PolicyState | None
    _cadence: Cadence | None
    _daily: DailyReport | None
    config: WatchdogConfig

    # -- writes that may fail (full disk) and alerts that may not arrive --------------------
    def _record(self, kind: str, **fields: JSONValue) -> None:
        """Append an event; a failed write is counted and alerted, never raised."""
        try:
            self._events.append(kind, **fields)
        except Exception as exc:  # noqa: BLE001 - a full disk, or any other broken writer
            self._write_failed("events", exc)
        else:
            self._write_ok("events")

    def _save(self, state: PolicyState) -> None:
        try:
            self._store.save(state)
        except Exception as exc:  # noqa: BLE001 - decisions are applied all the same
            self._write_failed("state", exc)
        else:
            self._write_ok("state")

    def _seam_error(self, seam: str, exc: BaseException) -> None:
        """A failure inside one tick (any exception type, at any seam): logged, recorded as a
        `tick_error` event and counted on /metrics (`tpwarden_watchdog_tick_errors_total`),
        which a shipped alert rule watches. Never raises."""
        log.error("watchdog %s failed: %s: %s", seam, type(exc).__name__, exc)
        if self._metrics is not None:
            self._metrics.tick_errors_total.labels(seam).inc()
        self._record("tick_error", seam=seam, error=f"{type(exc).__name__}: {exc}")

    def _file_invalid(self, what: str, path: str, aside: str | None, error: str) -> None:
        """A persisted file failed validation: moved aside, recorded and alerted."""
        self._record("file_invalid", file=what, path=path, moved_to=aside, error=error)
        self._queue_alert(
            {
                "incident_id": f"invalid-{what}",
                "category": "state_invalid",
                "message": f"watchdog {what} file {path} is invalid ({error}); moved to "
                f"{aside or '(could not move it)'}; the daemon goes on from a safe state",
            }
        )

    def _read_hold(self) -> tuple[OperatorHold | None, float | None]:
        got = load_hold(self.config.hold_path, quarantine=True)
        if got.invalid is not None and got.invalid != self._hold_error:
            self._file_invalid("hold", self.config.hold_path, got.moved_to, got.invalid)
        # A file moved aside is reported once; one that stays (unreadable) once per error.
        self._hold_error = None if got.moved_to else got.invalid
        return got.hold, got.released_at

    def _write_failed(self, what: str, exc: Exception) -> None:
        log.error("cannot write watchdog %s: %s: %s", what, type(exc).__name__, exc)
        if self._metrics is not None:
            self._metrics.write_errors_total.labels(what).inc()
        if what in self._broken_writes:
            return
        self._broken_writes.add(what)
        path = self.config.events_path if what == "events" else self.config.state_path
        self._queue_alert(
            {
                "incident_id": f"write-{what}",
                "category": "unwritable",
                "message": f"watchdog cannot write its {what} ({path}): {exc}; decisions are "
                "still applied, but the record of them is lost until the disk is fixed",
            }
        )

    def _write_ok(self, what: str) -> None:
        if what in self._broken_writes:
            self._broken_writes.discard(what)
            self._record("write_recovered", what=what)

    def _queue_alert(self, incident: JSONObject) -> None:
        incident = {"at": self._clock(), "probe_url": self.config.probe_url} | incident
        self._outbox.add(incident, self._clock())
        if self._metrics is not None:
            self._metrics.alerts_total.labels(incident.get("category", "?")).inc()
        self._flush_alerts()

    def _flush_alerts(self) -> None:
        """Try what is due; a broken alerter or outbox is a counted tick error, never raised."""
        try:
            reports = self._outbox.flush(self._clock())
        except Exception as exc:  # noqa: BLE001 - alerts never stop the loop
            self._seam_error("outbox", exc)
            reports = []
        for report in reports:
            self._record("alert_dropped" if report.get("dropped") else "alert_sent", **report)
        if self._metrics is not None:
            self._metrics.alerts_undelivered.set(len(self._outbox.pending))
        self._save_outbox()

    def _outbox_path(self) -> str:
        return os.path.join(self.config.state_dir, "outbox.json")

    def _save_outbox(self) -> None:
        try:
            atomic_write_json(self._outbox_path(), {"pending": self._outbox.pending})
        except Exception as exc:  # noqa: BLE001 - in memory it still is: retried while we live
            log.warning("cannot save the alert outbox: %s", exc)

    def _load_outbox(self) -> None:
        """Alerts left undelivered by the previous daemon; malformed items are dropped with an
        event (an item without `next_at` once raised KeyError on every tick)."""
        try:
            doc = read_json(self._outbox_path()) or {}
            pending = doc.get("pending") if isinstance(doc, dict) else None
            dropped = self._outbox.load(pending if isinstance(pending, list) else [])
        except Exception as exc:  # noqa: BLE001 - an unreadable outbox is an empty one
            log.warning("alert outbox unreadable: %s", exc)
            self._record("alert_dropped", error=f"outbox unreadable: {exc}")
            return
        for item, why in dropped:
            self._record("alert_dropped", error=why, item=item)

    def _follow_plan(self) -> None:
        """Switch probe target, key and policy to a newly applied plan (logged as an event).
        A plan that cannot be used (its key not resolvable here) is alerted, and the previous
        one is kept: the watchdog never goes blind by following a plan."""
        if self._follow is None:
            return
        try:
            change = self._follow()
        except Exception as exc:  # noqa: BLE001 - reported, the old plan stays in force
            error = f"{type(exc).__name__}: {exc}"
            if error != self._follow_error:
                self._follow_error = error
                self._record("plan_unusable", error=error, keeps=self.config.config_hash)
                self._queue_alert(
                    {
                        "incident_id": "plan",
                        "category": "plan_unusable",
                        "message": f"the newly applied plan cannot be followed ({error}); "
                        f"still watching config {self.config.config_hash}",
                    }
                )
            return
        if change is None:
            return
        self._follow_error = None
        old = self.config
        # Where this daemon keeps its files and serves /metrics does not move with the plan.
        self.config = dataclasses.replace(
            change.config,
            state_dir=old.state_dir,
            restart_lock_path=old.restart_lock_path,
            metrics_host=old.metrics_host,
            metrics_port=old.metrics_port,
        )
        self._prober.close()
        self._actuator.close()
        self._prober, self._actuator = change.prober, change.actuator
        self._policy = Policy(PolicyConfig.from_config(self.config))
        if self._cadence is not None:
            self._cadence.interval_s = self.config.interval_s
        if self._daily is not None:
            try:
                self._daily.apply(self.config.report)  # a moved delivery time takes effect now
            except Exception as exc:  # noqa: BLE001 - the plan is followed all the same
                self._seam_error("report", exc)
        assert self._state is not None
        self._state = dataclasses.replace(self._state, baseline=None, flat_since=None)
        self._record(
            "plan_changed",
            old_hash=old.config_hash,
            new_hash=self.config.config_hash,
            probe_url=self.config.probe_url,
            changes=config_changes(old, self.config),
            **change.detail,
        )
