"""The daemon's restart path, a collaborator the `Watchdog` (tpwarden.watchdog.daemon) owns and
calls: evidence, the incident dossier, the cluster restart lock, fencing, the actuator, and the
result handed back to the Watchdog, which gives it to the policy.

No dead ends: whatever fails on the way (evidence, the lock file, fencing, the actuator, any
exception type), `RestartPath.run` returns a result, ok or not, and the Watchdog hands it to
`Policy.on_restart_result`, so the phase never stays `restarting` (the policy's restart deadline
is the second net). A restart job that outlives the actuator's wait keeps the cluster restart
lock until its process really ended.

Fencing runs on one clock: the failure times are on the daemon's steady clock, the head
container's start time is the node's wall time; the incident's start is placed on the wall
clock as "this long ago" (monotonic). When the wall clock stepped since the daemon started
(NTP fixing a clock 24 h behind, or breaking one), the step is recorded and fencing skips
nothing: restarting a hang is the safe side of not knowing which clock was right.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from tpwarden.cluster.durable import JSONObject
from tpwarden.cluster.operator_lock import FileLock, WatchdogLocked
from tpwarden.watchdog.collaborators import Actuator
from tpwarden.watchdog.config import WatchdogConfig
from tpwarden.watchdog.daemon_io import DaemonFiles
from tpwarden.watchdog.exporter import WatchdogMetrics
from tpwarden.watchdog.incidents import IncidentStore
from tpwarden.watchdog.policy_state import PolicyState, Restart, RestartCause
from tpwarden.watchdog.runtime import CallTimedOut, RestartJobOverdue

log = logging.getLogger("tpwarden.watchdog.daemon")
T = TypeVar("T")

CLOCK_STEP_NOTE_S = 60.0  # wall and steady clocks apart by more than this: a step, recorded
# The dossier bounds itself (tpwarden.cluster.reports.incident, 10 s for all nodes); this is the net.
DOSSIER_CALL_TIMEOUT_S = 15.0


class BoundedCall(Protocol):  # `Watchdog._cluster_call`: fn() bounded in time
    def __call__(self, fn: Callable[[], T], what: str, timeout_s: float | None = None) -> T: ...


@dataclass(frozen=True)
class RestartResult:
    """How a restart ended, for the policy: applied (``ok``), failed (``error``), or not made
    because someone else holds the restart lock or restarted already (``skipped``)."""

    ok: bool
    error: str = ""
    skipped: bool = False


class RestartPath:
    """One restart at a time, from decision to result. Given at construction what stays for the
    daemon's life (where events go, its clock, /metrics, the cluster restart lock, the bounded
    call into the cluster, the state dir for dossiers); given per restart what a followed plan
    can change (the actuator, the config) and the policy state in force."""

    def __init__(
        self,
        files: DaemonFiles,
        clock: Callable[[], float],
        cluster_call: BoundedCall,
        state_dir: str,
        evidence_timeout_s: float,
        metrics: WatchdogMetrics | None = None,
        restart_lock: FileLock | None = None,
    ) -> None:
        self._files = files
        self._clock = clock
        self._cluster_call = cluster_call
        self._state_dir = state_dir
        self.evidence_timeout_s = evidence_timeout_s
        self.dossier_timeout_s = DOSSIER_CALL_TIMEOUT_S  # the bound of one dossier call
        self._metrics = metrics
        self.restart_lock = restart_lock
        self.overdue_job: RestartJobOverdue | None = None  # past the actuator's wait, running
        self.last_dossier: JSONObject | None = None  # the newest stored dossier's summary
        self._clock_step_seen: float | None = None

    def run(
        self, d: Restart, actuator: Actuator, config: WatchdogConfig, state: PolicyState
    ) -> RestartResult:
        """Restart and record the end; never raises: the result always goes to the policy."""
        try:
            result = self._attempt(d, actuator, config, state)
        except Exception as exc:  # noqa: BLE001 - a broken restart path is a failed restart
            self._files.seam_error("restart", exc)
            result = RestartResult(False, f"{type(exc).__name__}: {exc}")
        if result.skipped:
            self._files.record("restart_skipped", restart_id=d.restart_id, error=result.error)
        else:
            self._files.record(
                "restart_end", restart_id=d.restart_id, ok=result.ok, error=result.error or None
            )
        return result

    def dossier_fields(self, incident_id: str) -> JSONObject:
        """The suspect of this incident's dossier, for the alert (issue 32); nothing when no
        dossier was taken in this incident."""
        last = self.last_dossier
        if not last or not incident_id or last.get("incident_id") != incident_id:
            return {}
        return {"suspect": last.get("suspect"), "dossier_id": last.get("id"),
                "dossier_summary": last.get("summary")}  # fmt: skip

    def _attempt(
        self, d: Restart, actuator: Actuator, config: WatchdogConfig, state: PolicyState
    ) -> RestartResult:
        """The restart's result. Raises only for what the caller turns into a failed result."""
        evidence = dict(d.evidence)
        try:
            evidence["nodes"] = self._cluster_call(
                actuator.collect_evidence, "evidence", self.evidence_timeout_s
            )
        except Exception as exc:  # noqa: BLE001 - evidence is best effort
            evidence["nodes_error"] = f"{type(exc).__name__}: {exc}"
        self._files.record(
            "restart_begin",
            restart_id=d.restart_id,
            reason=d.reason,
            cause=d.cause,
            evidence=evidence,
        )
        # After restart_begin, so the time from the last counted failure to the decision's
        # record is what it was; the dossier's own cost is its took_s (issue 32).
        dossier = self._take_dossier(d, actuator, state)
        if dossier is not None:
            evidence["incident"] = dossier
            self._files.record("incident_dossier", restart_id=d.restart_id, **dossier)
        lock = self.restart_lock
        if lock is not None:
            if lock.held:  # our own earlier restart job is still running
                job = self.overdue_job
                pid = job.pid if job is not None else "?"
                return RestartResult(False, f"restart job (pid {pid}) still running", skipped=True)
            try:
                lock.acquire(f"restart_id={d.restart_id}")
            except WatchdogLocked as exc:
                return RestartResult(False, str(exc), skipped=True)
        keep_lock = False
        try:
            fenced = self._restarted_by_someone_else(d, actuator, config, state)
            if fenced:
                return RestartResult(False, fenced, skipped=True)
            if self._metrics is not None:
                self._metrics.restarts_total.labels(d.cause).inc()
            try:
                # The job keeps the lock's descriptor: the lock is held until the job ends, even
                # if this daemon is killed mid-restart (the next daemon then waits it out).
                fd = lock.fileno() if lock is not None else None
                actuator.restart(d.reason, evidence, keep_fds=() if fd is None else (fd,))
            except Exception as exc:  # noqa: BLE001 - the actuator raises on failure
                if lock is not None and isinstance(exc, RestartJobOverdue) and exc.still_running():
                    keep_lock, self.overdue_job = True, exc
                    self._files.record("restart_job_overdue", restart_id=d.restart_id, pid=exc.pid)
                return RestartResult(False, f"{type(exc).__name__}: {exc}")
            return RestartResult(True)
        finally:
            if lock is not None and not keep_lock:
                lock.release()

    def _take_dossier(
        self, d: Restart, actuator: Actuator, state: PolicyState
    ) -> JSONObject | None:
        """Which rank hung, and where (issue 32): the incident dossier, stored with this
        restart under the state dir. Bounded, and never in the restart's way: any failure is
        an ``error`` in the evidence, and the restart goes on. None: the actuator takes none."""
        take = actuator.collect_dossier
        try:
            doc = self._cluster_call(lambda: take(d.reason), "dossier", self.dossier_timeout_s)
            if doc is None:
                return None
            doc["restart_id"] = d.restart_id
            ident = IncidentStore(self._state_dir).save(doc)
        except Exception as exc:  # noqa: BLE001 - the dossier is best effort
            log.warning("incident dossier not taken: %s", exc)
            return {"error": f"{type(exc).__name__}: {exc}"}
        v = doc.get("verdict") or {}
        summary = {
            "id": ident,
            "incident_id": state.incident_id,
            "suspect": v.get("suspect"),
            "summary": v.get("summary"),
            "took_s": doc.get("took_s"),
        }
        self.last_dossier = summary
        return summary

    def reap(self) -> None:
        """Release the cluster restart lock once an overdue restart job has really ended."""
        job = self.overdue_job
        if job is None:
            return
        try:
            running = bool(job.still_running())
        except Exception as exc:  # noqa: BLE001 - cannot tell: keep the lock, say so
            self._files.seam_error("restart_job", exc)
            return
        if running:
            return
        self.overdue_job = None
        if self.restart_lock is not None:
            self.restart_lock.release()
        self._files.record("restart_job_ended", pid=job.pid)

    def wall_offset(self) -> float:
        """wall - steady now (0 without a wall clock). A step is recorded once per size."""
        wall = getattr(self._clock, "wall", None)
        if not callable(wall):
            return 0.0
        offset = float(wall()) - self._clock()
        if abs(offset) > CLOCK_STEP_NOTE_S and self._clock_step_seen != round(offset):
            self._clock_step_seen = round(offset)
            self._files.record(
                "clock_step",
                offset_s=offset,
                note="the wall clock moved against the daemon's steady clock; fencing compares "
                "on the wall clock now",
            )
        return offset

    def _restarted_by_someone_else(
        self, d: Restart, actuator: Actuator, config: WatchdogConfig, state: PolicyState
    ) -> str | None:
        """Fencing against a restart already made by another watchdog or an operator.

        The restart lock only serialises restarts; a second watchdog that reaches its N-th
        failure after the first one finished (its probes were refused while the new server
        booted) would restart again. So, holding the lock, ask the cluster when the head's
        container started: after this incident's evidence began (the first counted failure,
        less one probe period: refusals of a boot that began just before it), or after the boot
        this watchdog is timing, the restart was made by someone else -> skip.
        """
        if d.cause == RestartCause.BOOT_DEADLINE:
            since = state.boot_started_at
        else:
            ats = [f.get("at") for f in d.evidence.get("failures") or () if f.get("at")]
            since = min(ats) - (config.interval_s + config.timeout_s) if ats else None
        if since is None:
            return None
        offset = self.wall_offset()
        if abs(offset) > CLOCK_STEP_NOTE_S:
            # The wall clock stepped since this daemon started: which side was wrong is not
            # known, so no restart is skipped on a time comparison (the restart lock still
            # serialises restarts). Conservative: a hang is restarted.
            return None
        since += offset  # steady -> wall: the container's start is the node's wall time
        try:
            started = self._cluster_call(actuator.server_started_at, "started_at")
        except (Exception, CallTimedOut) as exc:  # cannot tell: restarting is the safe side
            log.warning("server_started_at() failed: %s", exc)
            return None
        if isinstance(started, (int, float)) and started > since:
            return (
                f"server (re)started at {started:.1f}, after this incident began ({since:.1f}): "
                "restarted by another watchdog or an operator; verifying in boot grace"
            )
        return None
