"""The watchdog's pure decision function: state + observation + clock -> new state + decisions.

Nothing here does I/O or reads a clock; the daemon passes `now` (wall-clock seconds, so persisted
deadlines survive a daemon restart) and applies the returned decisions.

States (`WatchdogPhase`) and transitions
--------------------------------
| phase      | meaning                                      | leaves to                                  |
|------------|----------------------------------------------|--------------------------------------------|
| BOOTING    | server (re)starting; failures never counted  | READY on the first OK probe; at the boot   |
|            | until `boot_deadline_at`                     | deadline: RESTARTING (1st missed boot),    |
|            |                                              | GIVEN_UP (2nd in a row), HELD (no budget)  |
| READY      | last judgement: alive (OK, or busy)          | SUSPECT on a counted failure               |
| SUSPECT    | 1..N-1 consecutive counted failures          | READY on OK/busy; RESTARTING at N; HELD    |
|            |                                              | when N is reached with no restart budget   |
| RESTARTING | Restart decided and persisted (with its id)  | BOOTING when the actuator returns or fails,|
|            | BEFORE the actuator runs                     | or at daemon start (kill -9 recovery: the  |
|            |                                              | restart is NOT repeated, only verified),   |
|            |                                              | or past `restart_deadline_s` (a failed     |
|            |                                              | restart: restart_failed alert)             |
| HELD       | automatic hold: restart budget exhausted     | READY on an OK probe; BOOTING on release   |
| GIVEN_UP   | two consecutive boots missed their deadline  | READY on an OK probe; BOOTING on release   |
| BLIND      | the probe is rejected (401/404/400): alive   | READY on an OK probe, or on a probe judged |
|            | or not, nothing can be judged; alerts again  | otherwise (a timeout, a refusal)           |
|            | every `blind_realert_s`                      |                                            |

Operator hold (`tpwarden watchdog hold --for 30m`) is an overlay, not a phase: it always has an
expiry; while it lasts every Restart becomes a `Hold` decision and a passed boot deadline is not
counted as a failed boot. Probing and counting continue; when it expires the normal rules resume.

Counting rules (probe verdicts)
-------------------------------
* OK -> ResetFailures (if any), READY; the incident (if any) is closed.
* REFUSED, HTTP_5XX, MALFORMED -> HARD: counted at once.
* HTTP_4XX (401 key, 404 model, 400) -> MISCONFIG: never counted (a restart cannot fix it), one
  Alert per incident. 429 -> BUSY.
* TIMEOUT -> judged from `/metrics` against the previous snapshot (the baseline, refreshed every
  tick):
  - BUSY if `generation_tokens_total`, `prompt_tokens_total` or `iteration_tokens_total_count`
    advanced, or `kv_cache_usage_perc` rose while `num_requests_running > 0` (chunked prefill
    allocates KV blocks chunk by chunk, so a long prefill in flight shows up here before its
    prompt tokens are counted at the end). BUSY is never counted and resets the streak (the engine
    demonstrably made progress). Continuous BUSY for `busy_alert_s` -> one Alert, never a restart.
    BUSY while a canary lease holds (`Observation.canary`) is the canary's load: never counted
    towards that alert, whose subject is users' load.
  - UNKNOWN (not counted, streak kept) when there is no baseline yet (first read after start or
    restart), when counters went backwards (server restarted under us), or when counters have
    been flat for less than `stall_window_s` (default: the probe timeout).
  - STALLED (counted) when counters have been flat for >= `stall_window_s`. Running/waiting gauges
    are not required: vLLM #46811 captured a wedge with `num_requests_running` = 0, and the
    probe's own request is queued work. A timeout with an unreadable `/metrics` is counted too
    (no evidence of progress; a refused `/metrics` is HARD).
  Because any progress resets the streak, N consecutive STALLED verdicts mean the counters were
  flat across the whole failure window (>= N x timeout). The field report's 60 s 128k prefills
  under a 120 s timeout finish inside one window and advance `prompt_tokens_total`: BUSY.
  Limits: an engine step longer than the whole window (N x (timeout + interval)) with no KV growth
  (a prefill that is not chunked) looks like a hang; a hang that starts mid-window is seen one
  window later (the window still shows the earlier progress).
* N (`failures`) consecutive counted failures -> Restart of the whole server (or Hold/GiveUp).

Boot grace
----------
`boot_deadline_at` = start + `boot_deadline_s`. Each change of the actuator's boot progress
(phase name or counter) moves the deadline to at least now + `boot_extend_s`, never beyond
start + `boot_cap_s` (default 2 x boot_deadline_s): a boot that keeps loading shards is not
killed, a boot that stalls is. At the deadline: the 1st missed boot restarts (budget permitting),
the 2nd consecutive one -> GiveUp + one Alert.

Restart budget: at most `max_restarts` restarts in any `restart_window_s`; a restart wanted past
it -> HELD + one Alert per incident. Automatic holds end only on a healthy probe or an operator
`release` (the budget's rolling window alone never re-arms restarts: no slow restart loop).
Alerts are deduplicated per (incident, category); the policy's categories (`AlertCategory`) are
misconfig, busy_ceiling, budget_exhausted, gave_up, restart_failed, hold_expired (and restarted
when `alert_on_restart`). A restart's cause (`RestartCause`) is probe_failures, boot_deadline or
boot_failed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from tpwarden.cluster.hold import OperatorHold
from tpwarden.watchdog.config import WatchdogConfig
from tpwarden.watchdog.observation import BootReading, Observation
from tpwarden.watchdog.policy_state import (
    Alert,
    AlertCategory,
    CountFailure,
    Decision,
    GiveUp,
    Hold,
    PolicyConfig,
    PolicyState,
    ResetFailures,
    Restart,
    RestartCause,
    Wait,
    WatchdogPhase,
)
from tpwarden.watchdog.verdict import COUNTED, ProbeVerdict, classify


@dataclass(frozen=True)
class Policy:
    """Pure rules; every method returns a new state and the decisions for the daemon to apply."""

    cfg: PolicyConfig

    # -- entry points ------------------------------------------------------------------------
    def on_startup(
        self, state: PolicyState | None, now: float
    ) -> tuple[PolicyState, list[Decision]]:
        """Daemon start: enter boot grace; never repeat a restart that was interrupted."""
        if state is None:
            return self._boot(PolicyState(), now), [Wait("daemon start: boot grace")]
        if state.restart_in_progress:
            rid = state.restart_in_progress
            return self._boot(state, now), [
                Wait(
                    f"restart {rid} was interrupted (daemon died mid-restart): not restarting again, "
                    "verifying in boot grace"
                )
            ]
        if state.phase in (WatchdogPhase.HELD, WatchdogPhase.GIVEN_UP):
            return replace(state, baseline=None, flat_since=None), [
                Wait(f"still {state.phase.value}")
            ]
        if state.phase in (WatchdogPhase.READY, WatchdogPhase.SUSPECT, WatchdogPhase.BLIND):
            # The server was up when the daemon stopped: a restarted daemon must not hand a hung
            # server a fresh boot grace. Counted failures are kept; only the /metrics baseline
            # (taken by the old process) is dropped.
            return replace(state, baseline=None, flat_since=None, unreadable_since=None), [
                Wait(f"daemon start: server was {state.phase.value}; no new boot grace")
            ]
        # BOOTING: keep the grace that was left when the state was last written. Wall-clock
        # time between two daemon lives is not trusted (an NTP step would eat or extend it).
        left = self.cfg.boot_deadline_s
        if state.boot_deadline_at is not None and state.updated_at is not None:
            left = min(max(0.0, state.boot_deadline_at - state.updated_at), self.cfg.boot_cap_s)
        booted = self._boot(state, now, keep_boot_failures=True)
        return replace(booted, boot_deadline_at=now + left), [
            Wait(f"daemon start: boot grace ({left:.0f}s left)")
        ]

    def on_restart_result(
        self, state: PolicyState, now: float, *, ok: bool, error: str = "", skipped: bool = False
    ) -> tuple[PolicyState, list[Decision]]:
        """The actuator returned (ok), raised (not ok) or another watchdog held the lock (skipped)."""
        d: list[Decision] = []
        s = state
        if skipped:
            s = replace(s, restart_times=s.restart_times[:-1])
            d.append(Wait("another watchdog holds the cluster restart lock: boot grace only"))
        s = self._boot(s, now, keep_boot_failures=True)
        if not ok and not skipped:
            s = self._alert(s, now, AlertCategory.RESTART_FAILED, f"restart failed: {error}", d)
        return s, d

    def decide(
        self, state: PolicyState, obs: Observation, now: float
    ) -> tuple[PolicyState, list[Decision]]:
        d: list[Decision] = []
        verdict, why, s = classify(self.cfg.stall_window_s, state, obs, now)
        s = replace(
            s,
            last_probe=obs.probe.to_json() | {"at": now},
            last_verdict=verdict.value,
            updated_at=now,
        )
        hold = obs.hold if obs.hold and obs.hold.until > now else None
        s = self._hold_expiry(s, obs.hold, now, d)
        if verdict is ProbeVerdict.OK:
            return self._healthy(s, now, d), d
        if verdict is ProbeVerdict.MISCONFIG:
            s = self._blind(s, why, now, d)
            if s.phase is WatchdogPhase.BLIND:
                return s, d
        elif s.phase is WatchdogPhase.BLIND:
            s = replace(s, phase=WatchdogPhase.READY, blind_since=None)
        if hold is not None and hold.kind == "down" and s.phase is not WatchdogPhase.RESTARTING:
            # Stopped on purpose: keep a fresh boot grace ready for the operator's `up`.
            s = replace(self._boot(s, now), boot_failures=0, incident_id=None, alerted=())
            d.append(
                Wait(
                    f"intentional stop by {hold.by or 'an operator'} ({hold.reason}): "
                    "no restart until `tpwarden up`"
                )
            )
            return s, d
        if s.phase in (WatchdogPhase.HELD, WatchdogPhase.GIVEN_UP):
            if (
                obs.released_at is not None
                and s.held_at is not None
                and obs.released_at > s.held_at
            ):
                s = replace(self._boot(s, now), boot_failures=0, restart_times=(), held_at=None)
                d.append(Wait("operator release: automatic restarts re-armed, boot grace"))
                return s, d
            s = self._count(s, verdict, why, now, d) if verdict in COUNTED else s
            d.append(Wait(f"{s.phase.value}: no automatic action until a healthy probe or release"))
            return s, d
        if s.phase is WatchdogPhase.RESTARTING:
            return self._restarting(s, now, d)
        if s.phase is WatchdogPhase.BOOTING:
            return self._booting(s, obs, hold, now, d)
        if verdict is ProbeVerdict.BUSY:
            if s.consecutive_failures:
                d.append(ResetFailures(s.consecutive_failures, why))
            if obs.canary is not None:  # the canary's load is not users': no busy ceiling
                s = replace(s, phase=WatchdogPhase.READY, consecutive_failures=0,
                            failure_log=(), busy_since=None)  # fmt: skip
                d.append(Wait(f"{why} (canary {obs.canary} running: its load, not users')"))
                return s, d
            busy_since = s.busy_since if s.busy_since is not None else now
            s = replace(
                s,
                phase=WatchdogPhase.READY,
                consecutive_failures=0,
                failure_log=(),
                busy_since=busy_since,
            )
            if now - busy_since >= self.cfg.busy_alert_s:
                s = self._alert(
                    s,
                    now,
                    AlertCategory.BUSY_CEILING,
                    f"probe has timed out on a busy server for {now - busy_since:.0f}s",
                    d,
                )
            d.append(Wait(why))
            return s, d
        if verdict not in COUNTED:
            d.append(Wait(why))
            return s, d
        s = self._count(s, verdict, why, now, d)
        if s.consecutive_failures >= self.cfg.failures:
            reason = f"{s.consecutive_failures} consecutive failed probes; last: {why}"
            return self._want_restart(s, reason, RestartCause.PROBE_FAILURES, hold, now, d)
        return s, d

    # -- helpers -----------------------------------------------------------------------------
    def _restarting(
        self, s: PolicyState, now: float, d: list[Decision]
    ) -> tuple[PolicyState, list[Decision]]:
        """A restart never stays in progress for good: past `restart_deadline_s` (the restart
        result never came back: the daemon's restart path broke) it is a failed restart."""
        began = s.restart_started_at
        if began is None:
            began = s.restart_times[-1] if s.restart_times else s.updated_at
        if began is not None and now - began < self.cfg.restart_deadline_s:
            d.append(Wait("restart in progress"))
            return s, d
        waited = f"{now - began:.0f}s" if began is not None else "an unknown time"
        error = (
            f"restart {s.restart_in_progress or '?'} gave no result within "
            f"{self.cfg.restart_deadline_s:g}s (waited {waited})"
        )
        s2, more = self.on_restart_result(s, now, ok=False, error=error)
        return s2, d + more

    def _healthy(self, s: PolicyState, now: float, d: list[Decision]) -> PolicyState:
        if s.consecutive_failures:
            d.append(ResetFailures(s.consecutive_failures, "probe answered"))
        d.append(Wait("healthy"))
        return replace(
            s,
            phase=WatchdogPhase.READY,
            consecutive_failures=0,
            failure_log=(),
            boot_failures=0,
            boot_started_at=None,
            boot_deadline_at=None,
            boot_progress=None,
            incident_id=None,
            alerted=(),
            held_at=None,
            busy_since=None,
            last_ok_at=now,
            blind_since=None,
            blind_alerted_at=None,
            unreadable_since=None,
            crash_seen_at=None,
        )

    def _booting(
        self,
        s: PolicyState,
        obs: Observation,
        hold: OperatorHold | None,
        now: float,
        d: list[Decision],
    ) -> tuple[PolicyState, list[Decision]]:
        bp = obs.boot_progress
        start = s.boot_started_at if s.boot_started_at is not None else now
        deadline = (
            s.boot_deadline_at if s.boot_deadline_at is not None else now + self.cfg.boot_deadline_s
        )
        if bp is not None and bp != s.boot_progress and _advances(s.boot_progress, bp):
            deadline = min(max(deadline, now + self.cfg.boot_extend_s), start + self.cfg.boot_cap_s)
            s = replace(s, boot_progress=bp)
        s = replace(s, boot_started_at=start, boot_deadline_at=deadline)
        crashed = bp is not None and bp.failed
        if bp is not None and bp.failed and hold is None:  # `crashed`, spelt out for mypy
            # A boot that is over (container exited) will not become healthy by waiting for the
            # deadline: a failed boot now, retried after a backoff that doubles per failure.
            seen = s.crash_seen_at if s.crash_seen_at is not None else now
            n = s.boot_failures  # failed boots before this one: 0 -> at once, then 60 s, 120 s..
            backoff = min(self.cfg.crash_backoff_s * 2 ** (n - 1), self.cfg.boot_deadline_s)
            backoff = 0.0 if n == 0 or n + 1 >= self.cfg.max_boot_failures else backoff
            s = replace(s, crash_seen_at=seen)
            if now - seen < backoff:
                d.append(Wait(f"boot failed ({bp.phase}); retry in {seen + backoff - now:.0f}s"))
                return s, d
            deadline = now
        if now < deadline:
            d.append(
                Wait(
                    f"boot grace: {deadline - now:.0f}s left"
                    + (f" ({bp.phase} {bp.progress:g})" if bp else "")
                )
            )
            return s, d
        if hold is not None:
            d.append(Hold(f"boot deadline passed; operator hold: {hold.reason}", hold.until))
            return s, d
        s = replace(s, boot_failures=s.boot_failures + 1, crash_seen_at=None)
        s = self._open_incident(s, now)
        late = f"server not healthy {now - start:.0f}s after boot start (deadline passed)"
        if crashed:
            late = f"boot failed {now - start:.0f}s after start ({bp.phase if bp else '?'})"
        if s.boot_failures >= self.cfg.max_boot_failures:
            s = replace(s, phase=WatchdogPhase.GIVEN_UP, held_at=now)
            d.append(GiveUp(f"{s.boot_failures} consecutive boots missed their deadline; {late}"))
            s = self._alert(
                s,
                now,
                AlertCategory.GAVE_UP,
                f"gave up restarting: {late}; "
                f"{s.boot_failures} boots in a row failed. Fix it, then `release`.",
                d,
            )
            return s, d
        return self._want_restart(
            s,
            late,
            RestartCause.BOOT_FAILED if crashed else RestartCause.BOOT_DEADLINE,
            hold,
            now,
            d,
        )

    def _count(
        self, s: PolicyState, verdict: ProbeVerdict, why: str, now: float, d: list[Decision]
    ) -> PolicyState:
        n = s.consecutive_failures + 1
        log = (s.failure_log + ({"at": now, "verdict": verdict.value, "detail": why},))[
            -self.cfg.failures :
        ]
        s = self._open_incident(s, now)
        if s.phase in (WatchdogPhase.READY, WatchdogPhase.SUSPECT, WatchdogPhase.BLIND):
            s = replace(s, phase=WatchdogPhase.SUSPECT)
        d.append(CountFailure(n, verdict.value, why))
        return replace(s, consecutive_failures=n, failure_log=log, busy_since=None)

    def _want_restart(
        self,
        s: PolicyState,
        reason: str,
        cause: RestartCause,
        hold: OperatorHold | None,
        now: float,
        d: list[Decision],
    ) -> tuple[PolicyState, list[Decision]]:
        if hold is not None:
            d.append(
                Hold(f"operator hold ({hold.reason}) suppresses restart: {reason}", hold.until)
            )
            return s, d
        recent = tuple(t for t in s.restart_times if now - t < self.cfg.restart_window_s)
        s = replace(s, restart_times=recent)
        if len(recent) >= self.cfg.max_restarts:
            s = replace(s, phase=WatchdogPhase.HELD, held_at=now)
            budget = (
                f"{len(recent)}/{self.cfg.max_restarts} restarts in {self.cfg.restart_window_s:g}s"
            )
            d.append(Hold(f"restart budget exhausted ({budget}): {reason}", None))
            s = self._alert(
                s,
                now,
                AlertCategory.BUDGET_EXHAUSTED,
                f"restart wanted but budget exhausted ({budget}): {reason}",
                d,
            )
            return s, d
        seq = s.restart_seq + 1
        rid = f"r{seq}-{int(now)}"
        evidence = {
            "cause": cause,
            "failures": list(s.failure_log),
            "metrics": s.baseline.to_json() if s.baseline else None,
            "boot_progress": asdict(s.boot_progress) if s.boot_progress else None,
        }
        s = replace(
            s,
            phase=WatchdogPhase.RESTARTING,
            restart_seq=seq,
            restart_in_progress=rid,
            restart_started_at=now,
            restart_times=recent + (now,),
        )
        d.append(Restart(rid, reason, cause, evidence))
        if self.cfg.alert_on_restart:
            s = self._alert(
                s, now, AlertCategory.RESTARTED, f"restarting the server ({rid}): {reason}", d
            )
        return s, d

    def _boot(self, s: PolicyState, now: float, keep_boot_failures: bool = True) -> PolicyState:
        return replace(
            s,
            phase=WatchdogPhase.BOOTING,
            boot_started_at=now,
            boot_deadline_at=now + self.cfg.boot_deadline_s,
            boot_progress=None,
            boot_failures=s.boot_failures if keep_boot_failures else 0,
            restart_in_progress=None,
            restart_started_at=None,
            consecutive_failures=0,
            failure_log=(),
            baseline=None,
            flat_since=None,
            busy_since=None,
            unreadable_since=None,
            crash_seen_at=None,
            blind_since=None,
            updated_at=now,  # the boot grace left is measured from here after a daemon restart
        )

    def _blind(self, s: PolicyState, why: str, now: float, d: list[Decision]) -> PolicyState:
        """A 4xx: the server answered, so no restart can fix it, but nothing can be judged
        either. BLIND, and alert again every `blind_realert_s` until a probe gets through."""
        if s.phase in (WatchdogPhase.HELD, WatchdogPhase.GIVEN_UP, WatchdogPhase.RESTARTING):
            return s
        since = s.blind_since if s.blind_since is not None else now
        s = replace(s, phase=WatchdogPhase.BLIND, blind_since=since, consecutive_failures=0)
        last = s.blind_alerted_at
        if last is None or now - last >= self.cfg.blind_realert_s:
            s = self._open_incident(s, now)
            msg = (
                f"watchdog is blind for {now - since:.0f}s: the probe is rejected ({why}); "
                "hangs cannot be detected until the probe's key/model is fixed"
            )
            d.append(Alert(s.incident_id or "", AlertCategory.MISCONFIG, msg))
            s = replace(s, blind_alerted_at=now)
        d.append(Wait(f"blind: {why}"))
        return s

    def _hold_expiry(
        self, s: PolicyState, hold: OperatorHold | None, now: float, d: list[Decision]
    ) -> PolicyState:
        """A hold that ran out without a release (a rollout killed with -9, a forgotten
        `watchdog hold`) ends on its own time and says so once."""
        if hold is None or hold.until > now or s.hold_expired_alerted == hold.until:
            return s
        s = self._open_incident(replace(s, hold_expired_alerted=hold.until), now)
        d.append(
            Alert(
                s.incident_id or "",
                AlertCategory.HOLD_EXPIRED,
                f"{hold.kind} by {hold.by or '?'} ({hold.reason}) expired without a release: "
                "automatic restarts are armed again",
            )
        )
        return s

    def _open_incident(self, s: PolicyState, now: float) -> PolicyState:
        if s.incident_id is not None:
            return s
        seq = s.incident_seq + 1
        return replace(s, incident_seq=seq, incident_id=f"inc-{seq}-{int(now)}", alerted=())

    def _alert(
        self, s: PolicyState, now: float, category: AlertCategory, message: str, d: list[Decision]
    ) -> PolicyState:
        s = self._open_incident(s, now)
        if category in s.alerted:
            return s
        d.append(Alert(s.incident_id or "", category, message))
        return replace(s, alerted=s.alerted + (category,))


def _advances(old: BootReading | None, new: BootReading) -> bool:
    return old is None or new.phase != old.phase or new.progress > old.progress


def detection_window_s(cfg: WatchdogConfig) -> tuple[float, float]:
    """(fastest, slowest) time from a hang to the Restart decision under these settings.

    Fastest: N probes each timing out right away, back to back. Slowest adds one interval per
    probe, plus one whole window when the hang starts mid-window under load (progress seen in the
    first window resets the streak).
    """
    per = cfg.timeout_s + cfg.interval_s
    return cfg.failures * cfg.timeout_s, (cfg.failures + 1) * per
