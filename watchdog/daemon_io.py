"""The daemon's side effects that must never stop a decision, as collaborators the `Watchdog`
(tpwarden.watchdog.daemon) owns and calls: `DaemonFiles` (event and state writes on a full disk,
counted, exported and alerted; alert delivery with retries through the `Outbox`; the validated
hold file) and `PlanFollower` (reading a newly applied plan, its failures reported once).

Each is given exactly what it uses in its constructor; none reaches into the Watchdog. The
watched config can change (a followed plan), so `DaemonFiles` reads it through a getter.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable

from tpwarden.cluster.canary_lease import lease_path, read_lease
from tpwarden.cluster.durable import JSONObject, JSONValue, atomic_write_json, read_json
from tpwarden.cluster.event_log import EventLog
from tpwarden.cluster.hold import OperatorHold, load_hold
from tpwarden.watchdog.alert import Outbox
from tpwarden.watchdog.collaborators import PlanChange
from tpwarden.watchdog.config import WatchdogConfig
from tpwarden.watchdog.exporter import WatchdogMetrics
from tpwarden.watchdog.policy_state import AlertCategory, PolicyState
from tpwarden.watchdog.state import StateStore

log = logging.getLogger("tpwarden.watchdog.daemon")


class DaemonFiles:
    """The event log, the state file, the alert outbox and the hold file of one daemon.

    `settings` returns the config in force (paths, probe URL); `clock` is the daemon's clock;
    `metrics` (optional) counts write errors, tick errors and alerts; `write_json` writes the
    outbox file (atomically, by default)."""

    def __init__(
        self,
        settings: Callable[[], WatchdogConfig],
        events: EventLog,
        store: StateStore,
        outbox: Outbox,
        clock: Callable[[], float],
        metrics: WatchdogMetrics | None = None,
        write_json: Callable[[str, JSONValue], None] = atomic_write_json,
    ) -> None:
        self._settings = settings
        self.events = events
        self.store = store
        self.outbox = outbox
        self._clock = clock
        self._metrics = metrics
        self.write_json = write_json
        self._broken_writes: set[str] = set()  # "state" / "events" failing right now
        self._hold_error: str | None = None

    # -- writes that may fail (full disk) and alerts that may not arrive --------------------
    def record(self, kind: str, **fields: JSONValue) -> None:
        """Append an event; a failed write is counted and alerted, never raised."""
        try:
            self.events.append(kind, **fields)
        except Exception as exc:  # noqa: BLE001 - a full disk, or any other broken writer
            self._write_failed("events", exc)
        else:
            self._write_ok("events")

    def save(self, state: PolicyState) -> None:
        try:
            self.store.save(state)
        except Exception as exc:  # noqa: BLE001 - decisions are applied all the same
            self._write_failed("state", exc)
        else:
            self._write_ok("state")

    def seam_error(self, seam: str, exc: BaseException) -> None:
        """A failure inside one tick (any exception type, at any seam): logged, recorded as a
        `tick_error` event and counted on /metrics (`tpwarden_watchdog_tick_errors_total`),
        which a shipped alert rule watches. Never raises."""
        log.error("watchdog %s failed: %s: %s", seam, type(exc).__name__, exc)
        if self._metrics is not None:
            self._metrics.tick_errors_total.labels(seam).inc()
        self.record("tick_error", seam=seam, error=f"{type(exc).__name__}: {exc}")

    def file_invalid(self, what: str, path: str, aside: str | None, error: str) -> None:
        """A persisted file failed validation: moved aside, recorded and alerted."""
        self.record("file_invalid", file=what, path=path, moved_to=aside, error=error)
        self.queue_alert(
            {
                "incident_id": f"invalid-{what}",
                "category": AlertCategory.STATE_INVALID,
                "message": f"watchdog {what} file {path} is invalid ({error}); moved to "
                f"{aside or '(could not move it)'}; the daemon goes on from a safe state",
            }
        )

    def read_canary(self, now: float) -> str | None:
        """The run id of a canary lease in force (`canary.json`), else None."""
        lease = read_lease(lease_path(self._settings().state_dir), now)
        return lease.run_id if lease is not None else None

    def read_hold(self) -> tuple[OperatorHold | None, float | None]:
        hold_path = self._settings().hold_path
        got = load_hold(hold_path, quarantine=True)
        if got.invalid is not None and got.invalid != self._hold_error:
            self.file_invalid("hold", hold_path, got.moved_to, got.invalid)
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
        config = self._settings()
        path = config.events_path if what == "events" else config.state_path
        self.queue_alert(
            {
                "incident_id": f"write-{what}",
                "category": AlertCategory.UNWRITABLE,
                "message": f"watchdog cannot write its {what} ({path}): {exc}; decisions are "
                "still applied, but the record of them is lost until the disk is fixed",
            }
        )

    def _write_ok(self, what: str) -> None:
        if what in self._broken_writes:
            self._broken_writes.discard(what)
            self.record("write_recovered", what=what)

    def queue_alert(self, incident: JSONObject) -> None:
        incident = {"at": self._clock(), "probe_url": self._settings().probe_url} | incident
        self.outbox.add(incident, self._clock())
        if self._metrics is not None:
            self._metrics.alerts_total.labels(incident.get("category", "?")).inc()
        self.flush_alerts()

    def flush_alerts(self) -> None:
        """Try what is due; a broken alerter or outbox is a counted tick error, never raised."""
        try:
            reports = self.outbox.flush(self._clock())
        except Exception as exc:  # noqa: BLE001 - alerts never stop the loop
            self.seam_error("outbox", exc)
            reports = []
        for report in reports:
            self.record("alert_dropped" if report.get("dropped") else "alert_sent", **report)
        if self._metrics is not None:
            self._metrics.alerts_undelivered.set(len(self.outbox.pending))
        self._save_outbox()

    def _outbox_path(self) -> str:
        return os.path.join(self._settings().state_dir, "outbox.json")

    def _save_outbox(self) -> None:
        try:
            self.write_json(self._outbox_path(), {"pending": self.outbox.pending})
        except Exception as exc:  # noqa: BLE001 - in memory it still is: retried while we live
            log.warning("cannot save the alert outbox: %s", exc)

    def load_outbox(self) -> None:
        """Alerts left undelivered by the previous daemon; malformed items are dropped with an
        event (an item without `next_at` once raised KeyError on every tick)."""
        try:
            doc = read_json(self._outbox_path()) or {}
            pending = doc.get("pending") if isinstance(doc, dict) else None
            dropped = self.outbox.load(pending if isinstance(pending, list) else [])
        except Exception as exc:  # noqa: BLE001 - an unreadable outbox is an empty one
            log.warning("alert outbox unreadable: %s", exc)
            self.record("alert_dropped", error=f"outbox unreadable: {exc}")
            return
        for item, why in dropped:
            self.record("alert_dropped", error=why, item=item)


class PlanFollower:
    """Asks `follow` for a newly applied plan. A plan that cannot be read or used (its key not
    resolvable here) is recorded and alerted once per error through `files`, and the previous
    one is kept: the watchdog never goes blind by following a plan."""

    def __init__(self, follow: Callable[[], PlanChange | None], files: DaemonFiles) -> None:
        self.follow = follow
        self._files = files
        self._error: str | None = None

    def poll(self, current: WatchdogConfig) -> tuple[PlanChange, WatchdogConfig] | None:
        """The change and the config to watch from now on, or None (no change, or unusable)."""
        try:
            change = self.follow()
        except Exception as exc:  # noqa: BLE001 - reported, the old plan stays in force
            error = f"{type(exc).__name__}: {exc}"
            if error != self._error:
                self._error = error
                self._files.record("plan_unusable", error=error, keeps=current.config_hash)
                self._files.queue_alert(
                    {
                        "incident_id": "plan",
                        "category": AlertCategory.PLAN_UNUSABLE,
                        "message": f"the newly applied plan cannot be followed ({error}); "
                        f"still watching config {current.config_hash}",
                    }
                )
            return None
        if change is None:
            return None
        self._error = None
        # Where this daemon keeps its files and serves /metrics does not move with the plan.
        config = dataclasses.replace(
            change.config,
            state_dir=current.state_dir,
            restart_lock_path=current.restart_lock_path,
            metrics_host=current.metrics_host,
            metrics_port=current.metrics_port,
        )
        return change, config
