"""The daemon's restart path (a mixin of `Watchdog`, tpwarden.watchdog.daemon, kept apart for
size): evidence, the cluster restart lock, fencing, the actuator, and the result.

No dead ends: whatever fails on the way (evidence, the lock file, fencing, the actuator, any
exception type), the path ends in `Policy.on_restart_result`, ok or not, so the phase never
stays `restarting` (the policy's restart deadline is the second net). A restart job that
outlives the actuator's wait keeps the cluster restart lock until its process really ended.

Fencing runs on one clock: the failure times are on the daemon's steady clock, the head
container's start time is the node's wall time; the incident's start is placed on the wall
clock as "this long ago" (monotonic). When the wall clock stepped since the daemon started
(NTP fixing a clock 24 h behind, or breaking one), the step is recorded and fencing skips
nothing: restarting a hang is the safe side of not knowing which clock was right.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol, TypeVar

from tpwarden.cluster.durable import JSONObject, JSONValue
from tpwarden.cluster.operator_lock import FileLock, WatchdogLocked
from tpwarden.watchdog.collaborators import Actuator
from tpwarden.watchdog.config import WatchdogConfig
from tpwarden.watchdog.exporter import WatchdogMetrics
from tpwarden.watchdog.incidents import IncidentStore
from tpwarden.watchdog.policy import Policy
from tpwarden.watchdog.policy_state import Decision, PolicyState, Restart
from tpwarden.watchdog.runtime import CallTimedOut, RestartJobOverdue

log = logging.getLogger("tpwarden.watchdog.daemon")
T = TypeVar("T")

CLOCK_STEP_NOTE_S = 60.0  # wall and steady clocks apart by more than this: a step, recorded
# The dossier bounds itself (tpwarden.cluster.reports.incident, 10 s for all nodes); this is the net.
DOSSIER_CALL_TIMEOUT_S = 15.0


class _Record(Protocol):  # `DaemonIO._record`: an event, never raises
    def __call__(self, kind: str, **fields: JSONValue) -> None: ...


class _BoundedCall(Protocol):  # `Watchdog._cluster_call`: fn() bounded in time
    def __call__(self, fn: Callable[[], T], what: str, timeout_s: float | None = None) -> T: ...


class RestartPath:
    """Needs from the host class: config, _actuator, _clock, _metrics, _policy, _state,
    _restart_lock, _overdue_job, _clock_step_seen, _record, _commit, _cluster_call,
    _seam_error, evidence_timeout_s."""

    config: WatchdogConfig
    _actuator: Actuator
    _clock: Callable[[], float]
    _metrics: WatchdogMetrics | None
    _policy: Policy
    _state: PolicyState | None
    _restart_lock: FileLock | None
    _overdue_job: RestartJobOverdue | None
    _clock_step_seen: float | None
    evidence_timeout_s: float
    _last_dossier: JSONObject | None = None  # the newest stored dossier's summary
    dossier_timeout_s: float = DOSSIER_CALL_TIMEOUT_S  # the bound of one dossier call
    _record: _Record
    _commit: Callable[[PolicyState, list[Decision]], None]
    _cluster_call: _BoundedCall
    _seam_error: Callable[[str, BaseException], None]

    def _restart(self, d: Restart) -> None:
        """Restart, then always hand the result to the policy (ok, failed or skipped)."""
        try:
            ok, error, skipped = self._attempt_restart(d)
        except Exception as exc:  # noqa: BLE001 - a broken restart path is a failed restart
            self._seam_error("restart", exc)
            ok, error, skipped = False, f"{type(exc).__name__}: {exc}", False
        if skipped:
            self._record("restart_skipped", restart_id=d.restart_id, error=error)
        else:
            self._record("restart_end", restart_id=d.restart_id, ok=ok, error=error or None)
        assert self._state is not None
        state, more = self._policy.on_restart_result(
            self._state, self._clock(), ok=ok, error=error, skipped=skipped
        )
        self._commit(state, more)

    def _attempt_restart(self, d: Restart) -> tuple[bool, str, bool]:
        """(ok, error, skipped). Raises only for what the caller turns into a failed result."""
        evidence = dict(d.evidence)
        try:
            evidence["nodes"] = self._cluster_call(
                self._actuator.collect_evidence, "evidence", self.evidence_timeout_s
            )
        except Exception as exc:  # noqa: BLE001 - evidence is best effort
            evidence["nodes_error"] = f"{type(exc).__name__}: {exc}"
        self._record(
            "restart_begin",
            restart_id=d.restart_id,
            reason=d.reason,
            cause=d.cause,
            evidence=evidence,
        )
        # After restart_begin, so the time from the last counted failure to the decision's
        # record is what it was; the dossier's own cost is its took_s (issue 32).
        dossier = self._take_dossier(d)
        if dossier is not None:
            evidence["incident"] = dossier
            self._record("incident_dossier", restart_id=d.restart_id, **dossier)
        lock = self._restart_lock
        if lock is not None:
            if lock.held:  # our own earlier restart job is still running
                job = self._overdue_job
                pid = job.pid if job is not None else "?"
                return False, f"restart job (pid {pid}) still running", True
            try:
                lock.acquire(f"restart_id={d.restart_id}")
            except WatchdogLocked as exc:
                return False, str(exc), True
        keep_lock = False
        try:
            fenced = self._restarted_by_someone_else(d)
            if fenced:
                return False, fenced, True
            if self._metrics is not None:
                self._metrics.restarts_total.labels(d.cause).inc()
            try:
                self._actuator.restart(d.reason, evidence)
            except Exception as exc:  # noqa: BLE001 - the actuator raises on failure
                if lock is not None and isinstance(exc, RestartJobOverdue) and exc.still_running():
                    keep_lock, self._overdue_job = True, exc
                    self._record("restart_job_overdue", restart_id=d.restart_id, pid=exc.pid)
                return False, f"{type(exc).__name__}: {exc}", False
            return True, "", False
        finally:
            if lock is not None and not keep_lock:
                lock.release()

    def _take_dossier(self, d: Restart) -> JSONObject | None:
        """Which rank hung, and where (issue 32): the incident dossier, stored with this
        restart under the state dir. Bounded, and never in the restart's way: any failure is
        an ``error`` in the evidence, and the restart goes on. None: the actuator takes none."""
        take = self._actuator.collect_dossier
        try:
            doc = self._cluster_call(lambda: take(d.reason), "dossier", self.dossier_timeout_s)
            if doc is None:
                return None
            doc["restart_id"] = d.restart_id
            ident = IncidentStore(self.config.state_dir).save(doc)
        except Exception as exc:  # noqa: BLE001 - the dossier is best effort
            log.warning("incident dossier not taken: %s", exc)
            return {"error": f"{type(exc).__name__}: {exc}"}
        v = doc.get("verdict") or {}
        summary = {
            "id": ident,
            "incident_id": self._state.incident_id if self._state is not None else None,
            "suspect": v.get("suspect"),
            "summary": v.get("summary"),
            "took_s": doc.get("took_s"),
        }
        self._last_dossier = summary
        return summary

    def _reap_restart_job(self) -> None:
        """Release the cluster restart lock once an overdue restart job has really ended."""
        job = self._overdue_job
        if job is None:
            return
        try:
            running = bool(job.still_running())
        except Exception as exc:  # noqa: BLE001 - cannot tell: keep the lock, say so
            self._seam_error("restart_job", exc)
            return
        if running:
            return
        self._overdue_job = None
        if self._restart_lock is not None:
            self._restart_lock.release()
        self._record("restart_job_ended", pid=job.pid)

    def _wall_offset(self) -> float:
        """wall - steady now (0 without a wall clock). A step is recorded once per size."""
        wall = getattr(self._clock, "wall", None)
        if not callable(wall):
            return 0.0
        offset = float(wall()) - self._clock()
        if abs(offset) > CLOCK_STEP_NOTE_S and self._clock_step_seen != round(offset):
            self._clock_step_seen = round(offset)
            self._record(
                "clock_step",
                offset_s=offset,
                note="the wall clock moved against the daemon's steady clock; fencing compares "
                "on the wall clock now",
            )
        return offset

    def _restarted_by_someone_else(self, d: Restart) -> str | None:
        """Fencing against a restart already made by another watchdog or an operator.

        The restart lock only serialises restarts; a second watchdog that reaches its N-th
        failure after the first one finished (its probes were refused while the new server
        booted) would restart again. So, holding the lock, ask the cluster when the head's
        container started: after this incident's evidence began (the first counted failure,
        less one probe period: refusals of a boot that began just before it), or after the boot
        this watchdog is timing, the restart was made by someone else -> skip.
        """
        assert self._state is not None
        if d.cause == "boot_deadline":
            since = self._state.boot_started_at
        else:
            ats = [f.get("at") for f in d.evidence.get("failures") or () if f.get("at")]
            since = min(ats) - (self.config.interval_s + self.config.timeout_s) if ats else None
        if since is None:
            return None
        offset = self._wall_offset()
        if abs(offset) > CLOCK_STEP_NOTE_S:
            # The wall clock stepped since this daemon started: which side was wrong is not
            # known, so no restart is skipped on a time comparison (the restart lock still
            # serialises restarts). Conservative: a hang is restarted.
            return None
        since += offset  # steady -> wall: the container's start is the node's wall time
        try:
            started = self._cluster_call(self._actuator.server_started_at, "started_at")
        except (Exception, CallTimedOut) as exc:  # cannot tell: restarting is the safe side
            log.warning("server_started_at() failed: %s", exc)
            return None
        if isinstance(started, (int, float)) and started > since:
            return (
                f"server (re)started at {started:.1f}, after this incident began ({since:.1f}): "
                "restarted by another watchdog or an operator; verifying in boot grace"
            )
        return None
