"""What the watchdog's policy keeps and returns: its phase, its state (persisted as state.json),
its configuration and its decisions. Plain types; the rules that move between them are in
`tpwarden.watchdog.policy` (its docstring has the phase table and the counting rules).
"""

from __future__ import annotations

import enum
import math
from dataclasses import asdict, dataclass

from tpwarden.cluster.durable import JSONObject, JSONValue
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
    cause: str  # "probe_failures" | "boot_deadline": bounded label for metrics
    evidence: JSONObject


@dataclass(frozen=True)
class Alert:
    incident_id: str
    category: (
        str  # misconfig | busy_ceiling | budget_exhausted | gave_up | restart_failed | restarted
    )
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
    phase: WatchdogPhase = WatchdogPhase.BOOTING
    consecutive_failures: int = 0
    boot_started_at: float | None = None
    boot_deadline_at: float | None = None
    boot_progress: BootReading | None = None
    boot_failures: int = 0  # consecutive boots that missed their deadline
    restart_times: tuple[float, ...] = ()
    restart_seq: int = 0  # monotonic restart epoch (fencing token)
    restart_in_progress: str | None = None
    incident_seq: int = 0
    incident_id: str | None = None
    alerted: tuple[str, ...] = ()  # alert kinds already sent for the current incident
    held_at: float | None = None
    baseline: MetricsSnapshot | None = None
    flat_since: float | None = None
    busy_since: float | None = None
    failure_log: tuple[JSONObject, ...] = ()
    last_probe: JSONObject | None = None
    last_verdict: str | None = None
    last_ok_at: float | None = None
    updated_at: float | None = None
    blind_since: float | None = None
    blind_alerted_at: float | None = None  # last "blind" alert: re-sent every blind_realert_s
    unreadable_since: float | None = None  # first timed-out probe with /metrics unreadable
    crash_seen_at: float | None = None  # boot seen failed (container exited): retry after backoff
    hold_expired_alerted: float | None = None  # `until` of the last expired hold alerted on
    restart_started_at: float | None = None  # when the restart in progress was decided

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
        """The state from its JSON; ValueError naming the first field of a wrong type or value
        (state.json is data, not trust: `"consecutive_failures": "3"` must not load)."""
        check_state_json(data)
        bp = data.get("boot_progress")
        base = data.get("baseline")
        known = {f for f in cls.__dataclass_fields__}
        values = {k: v for k, v in data.items() if k in known}
        values.update(
            phase=WatchdogPhase(data.get("phase", WatchdogPhase.BOOTING.value)),
            boot_progress=BootReading(**bp) if bp else None,
            baseline=MetricsSnapshot.from_json(base) if base else None,
            restart_times=tuple(data.get("restart_times") or ()),
            alerted=tuple(data.get("alerted") or ()),
            failure_log=tuple(data.get("failure_log") or ()),
        )
        return cls(**values)


_INT_FIELDS = ("consecutive_failures", "boot_failures", "restart_seq", "incident_seq")
_TIME_FIELDS = (
    "boot_started_at",
    "boot_deadline_at",
    "held_at",
    "flat_since",
    "busy_since",
    "last_ok_at",
    "updated_at",
    "blind_since",
    "blind_alerted_at",
    "unreadable_since",
    "crash_seen_at",
    "hold_expired_alerted",
    "restart_started_at",
)
_STR_FIELDS = ("restart_in_progress", "incident_id", "last_verdict")


def _is_time(v: JSONValue) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def check_state_json(data: JSONValue) -> None:
    """ValueError unless `data` has the shape `PolicyState.to_json()` writes."""
    if not isinstance(data, dict):
        raise ValueError("policy state is not an object")

    def bad(key: str, want: str) -> ValueError:
        return ValueError(f"{key}: {data[key]!r} is not {want}")

    for key in _INT_FIELDS:
        v = data.get(key, 0)
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise bad(key, "an integer >= 0")
    for key in _TIME_FIELDS:
        if data.get(key) is not None and not _is_time(data[key]):
            raise bad(key, "a finite number")
    for key in _STR_FIELDS:
        if data.get(key) is not None and not isinstance(data[key], str):
            raise bad(key, "a string")
    if data.get("phase", "booting") not in {p.value for p in WatchdogPhase}:
        raise bad("phase", "a phase")
    times = data.get("restart_times") or []
    if not isinstance(times, list) or not all(_is_time(t) for t in times):
        raise bad("restart_times", "a list of finite numbers")
    alerted = data.get("alerted") or []
    if not isinstance(alerted, list) or not all(isinstance(a, str) for a in alerted):
        raise bad("alerted", "a list of strings")
    flog = data.get("failure_log") or []
    if not isinstance(flog, list) or not all(isinstance(f, dict) for f in flog):
        raise bad("failure_log", "a list of objects")
    for key in ("boot_progress", "baseline", "last_probe"):
        if data.get(key) is not None and not isinstance(data[key], dict):
            raise bad(key, "an object")


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
        return cls(
            failures=c.failures,
            stall_window_s=c.stall_window_s,
            boot_deadline_s=c.boot_deadline_s,
            boot_extend_s=c.boot_extend_s,
            boot_cap_s=c.boot_cap_s,
            max_restarts=c.max_restarts,
            restart_window_s=c.restart_window_s,
            busy_alert_s=c.busy_alert_s,
            alert_on_restart=c.alert_on_restart,
            blind_realert_s=c.blind_realert_s,
            crash_backoff_s=c.crash_backoff_s,
            max_boot_failures=c.max_boot_failures,
            restart_deadline_s=c.restart_deadline_s,
        )
