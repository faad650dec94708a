"""What the watchdog's policy keeps and returns: its phase, its state (persisted as state.json),
its configuration and its decisions. Plain types; the rules that move between them are in
`tpwarden.watchdog.policy` (its docstring has the phase table and the counting rules).
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import asdict, dataclass

from tpwarden.cluster.documents import STRICT, Count, Time, load_document
from tpwarden.cluster.durable import JSONObject
from tpwarden.cluster.vllm.probe_types import MetricsSnapshot
from tpwarden.watchdog.config import WatchdogConfig
from tpwarden.watchdog.observation import BootReading


class WatchdogPhase(enum.StrEnum):
    BOOTING = "booting"
    READY = "ready"
    SUSPECT = "suspect"
    RESTARTING = "restarting"
    HELD = "held"
    GIVEN_UP = "given_up"
    BLIND = "blind"  # the server answers 401/404/400 to the probe: alive or not, we cannot tell


class RestartCause(enum.StrEnum):
    """Why the watchdog restarts: the `cause` label of tpwarden_watchdog_restarts_total."""

    PROBE_FAILURES = "probe_failures"  # `failures` consecutive counted probe failures
    BOOT_DEADLINE = "boot_deadline"  # a boot missed its (extended) deadline
    BOOT_FAILED = "boot_failed"  # a boot failed outright (a rank's container exited), after backoff


class AlertCategory(enum.StrEnum):
    """An alert's category: one incident alerts once per category. The policy raises the first
    seven, the daemon the rest; each has its alertname, severity and runbook section
    (`tpwarden.watchdog.alertmanager.CATEGORIES`)."""

    MISCONFIG = "misconfig"  # the probe gets 401/404/400: blind, a restart cannot fix it
    BUSY_CEILING = "busy_ceiling"  # timed out but busy for `busy_alert_s`: never restarted
    BUDGET_EXHAUSTED = "budget_exhausted"  # a restart wanted past the budget: held
    GAVE_UP = "gave_up"  # two boots in a row missed their deadline
    RESTART_FAILED = "restart_failed"  # the restart itself failed
    RESTARTED = "restarted"  # a restart was made (only with `alert_on_restart`)
    HOLD_EXPIRED = "hold_expired"  # an operator hold ran out without a release
    TICK_ERRORS = "tick_errors"  # the daemon's tick failed several times in a row
    STATE_INVALID = "state_invalid"  # a state file was unreadable and moved aside
    UNWRITABLE = "unwritable"  # state.json or events.jsonl cannot be written
    PLAN_UNUSABLE = "plan_unusable"  # a newly applied plan cannot be followed
    MORNING_REPORT = "morning_report"  # the daily morning report (not an incident)


# ---- decisions ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Wait:
    reason: str


@dataclass(frozen=True)
class CountFailure:
    count: int
    verdict: str
    detail: str


@dataclass(frozen=True)
class ResetFailures:
    previous: int
    reason: str


@dataclass(frozen=True)
class Restart:
    restart_id: str
    reason: str
    cause: RestartCause  # a bounded label for metrics
    evidence: JSONObject


@dataclass(frozen=True)
class Alert:
    incident_id: str
    category: AlertCategory
    message: str


@dataclass(frozen=True)
class Hold:
    reason: str
    until: float | None  # None: until a healthy probe or an operator release


@dataclass(frozen=True)
class GiveUp:
    reason: str


Decision = Wait | CountFailure | ResetFailures | Restart | Alert | Hold | GiveUp


def decision_name(d: Decision) -> str:
    return {
        Wait: "wait",
        CountFailure: "count_failure",
        ResetFailures: "reset_failures",
        Restart: "restart",
        Alert: "alert",
        Hold: "hold",
        GiveUp: "give_up",
    }[type(d)]


# ---- state ----------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class PolicyState:
    """The policy's state; its annotations are also state.json's schema (`from_json`)."""

    __pydantic_config__ = STRICT  # state.json is data, not trust: nothing coerced

    phase: WatchdogPhase = WatchdogPhase.BOOTING
    consecutive_failures: Count = 0
    boot_started_at: Time | None = None
    boot_deadline_at: Time | None = None
    boot_progress: BootReading | None = None
    boot_failures: Count = 0  # consecutive boots that missed their deadline
    restart_times: tuple[Time, ...] = ()
    restart_seq: Count = 0  # monotonic restart epoch (fencing token)
    restart_in_progress: str | None = None
    incident_seq: Count = 0
    incident_id: str | None = None
    alerted: tuple[str, ...] = ()  # alert kinds already sent for the current incident
    held_at: Time | None = None
    baseline: MetricsSnapshot | None = None
    flat_since: Time | None = None
    busy_since: Time | None = None
    failure_log: tuple[JSONObject, ...] = ()
    last_probe: JSONObject | None = None
    last_verdict: str | None = None
    last_ok_at: Time | None = None
    updated_at: Time | None = None
    blind_since: Time | None = None
    blind_alerted_at: Time | None = None  # last "blind" alert: re-sent every blind_realert_s
    unreadable_since: Time | None = None  # first timed-out probe with /metrics unreadable
    crash_seen_at: Time | None = None  # boot seen failed (container exited): retry after backoff
    hold_expired_alerted: Time | None = None  # `until` of the last expired hold alerted on
    restart_started_at: Time | None = None  # when the restart in progress was decided

    def to_json(self) -> JSONObject:
        data = asdict(self)
        data["phase"] = self.phase.value
        data["baseline"] = self.baseline.to_json() if self.baseline else None
        data["restart_times"] = list(self.restart_times)
        data["alerted"] = list(self.alerted)
        data["failure_log"] = list(self.failure_log)
        return data

    @classmethod
    def from_json(cls, data: JSONObject) -> PolicyState:
        """The state from its JSON, checked against the annotations above; ValueError naming
        the first field of a wrong type or value (`"consecutive_failures": "3"` must not load)."""
        return load_document(cls, data)


@dataclass(frozen=True, kw_only=True)
class PolicyConfig:
    """The policy's knobs. No defaults of its own: built by `from_config` from the daemon's
    `WatchdogConfig`, whose defaults are the inventory field's (issue 31, item 3)."""

    failures: int
    stall_window_s: float
    boot_deadline_s: float
    boot_extend_s: float
    boot_cap_s: float
    max_restarts: int
    restart_window_s: float
    busy_alert_s: float
    alert_on_restart: bool
    blind_realert_s: float
    crash_backoff_s: float
    max_boot_failures: int
    restart_deadline_s: float  # RESTARTING longer than this: failed

    @classmethod
    def from_config(cls, c: WatchdogConfig) -> PolicyConfig:
        """Each knob is the daemon's setting of the same name (a field or a derived property
        of `WatchdogConfig`): the names are the one list, not re-typed here."""
        return cls(**{f.name: getattr(c, f.name) for f in dataclasses.fields(cls)})
