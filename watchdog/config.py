"""Typed watchdog settings, validated once at the edge.

`WatchdogConfig` carries every field of the inventory's `WatchdogSpec` (same names) plus what the
caller resolves from the cluster spec: the probe's base URL, the served model name, the API key and
the cluster-wide restart lock path. `from_spec()` reads the spec by attribute name, so it works with
the lead's frozen dataclass or any object that has those attributes.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field

from tpwarden.cluster.durable import JSONObject
from tpwarden.cluster.errors import ConfigError
from tpwarden.cluster.settings import WatchdogSpec

# Bounds for the policy knobs that are not (yet) part of WatchdogSpec.
DEFAULT_BOOT_EXTEND_S = 300.0  # each visible boot-progress change buys at most this much time
MAX_HOLD_S = 7 * 24 * 3600.0  # an operator hold is time-limited: never longer than a week
# The RESTARTING phase ends by this deadline whatever happened to the restart (the actuator
# waits up to 1800 s for the restart job; past this the policy counts it as a failed restart).
RESTART_DEADLINE_S = 1900.0


def hold_path(state_dir: str) -> str:
    """Where a watchdog with this state directory reads its operator hold (its format:
    `state.hold_document`). Here, not in state.py, because state.py imports the policy, which
    imports this module."""
    return os.path.join(state_dir, "hold.json")


@dataclass(frozen=True, kw_only=True)
class ReportConfig:
    """The daily morning report (inventory `tpwarden.report`, issue 31): posted to the alert
    hooks at `deliver_at` (HH:MM in `tz`), covering the `window_h` hours before. Thermal files
    are read from `thermal_dir` on the watchdog's host (the head's own agent writes there), and
    `nodes` names every node, so the report can say whose thermal files it did not have."""

    deliver_at: str
    tz: str = "UTC"
    window_h: float = 12.0
    thermal_dir: str = "/var/log/tpwarden/thermal"  # tpwarden.thermal.dir
    nodes: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class WatchdogConfig:
    """Everything the probe, the policy and the daemon need. Times are seconds."""

    probe_url: str
    state_dir: str
    interval_s: float = 30.0
    timeout_s: float = 120.0
    failures: int = 3
    boot_deadline_s: float = 1800.0
    max_restarts: int = 2
    restart_window_s: float = 21600.0
    alert_command: tuple[str, ...] | None = None
    alert_webhook: str | None = field(default=None, repr=False)  # often carries a token
    alert_webhook_format: str = "tpwarden"  # or "alertmanager" (its webhook payload, version 4)
    metrics_host: str = "127.0.0.1"
    metrics_port: int = 9410
    model: str | None = None
    api_key: str | None = field(default=None, repr=False)
    restart_lock_path: str | None = None
    # Policy refinements (defaults derived from the fields above when left as None).
    stall_after_s: float | None = None  # flat counters for this long make a timeout a stall
    boot_extend_s: float = DEFAULT_BOOT_EXTEND_S
    boot_max_s: float | None = None  # hard cap on an extended boot; default 2 x boot_deadline_s
    busy_alert_s: float = 1800.0  # continuous "busy" timeouts this long -> alert (never restart)
    metrics_timeout_s: float = 10.0
    alert_on_restart: bool = False  # also notify (once per incident) when a restart is made
    blind_realert_s: float = 3600.0  # while every probe gets 401/404: alert again this often
    crash_backoff_s: float = 60.0  # retry delay after a boot that failed (doubles per failure)
    max_boot_failures: int = 2  # consecutive failed boots (deadline or crash) -> give up
    alert_retry_max_s: float = 900.0  # undelivered alerts are retried with backoff up to this
    restart_deadline_s: float = RESTART_DEADLINE_S  # a restart still "in progress" after this fails
    events_max_bytes: int = 64 * 1024 * 1024  # events.jsonl rotates to events.jsonl.1 past this
    config_hash: str | None = None  # the applied plan this config was built from
    report: ReportConfig | None = None  # the daily morning report; None: not delivered

    def __post_init__(self) -> None:
        problems = []
        if not self.probe_url.startswith(("http://", "https://")):
            problems.append(("probe_url", "must start with http:// or https://"))
        for name in ("interval_s", "timeout_s", "boot_deadline_s", "restart_window_s"):
            if not getattr(self, name) > 0:
                problems.append((name, "must be > 0"))
        if self.failures < 1:
            problems.append(("failures", "must be >= 1"))
        if self.max_restarts < 0:
            problems.append(("max_restarts", "must be >= 0"))
        if self.alert_command is not None and (
            isinstance(self.alert_command, str) or not all(self.alert_command)
        ):
            problems.append(("alert_command", "must be an argv list, never a shell string"))
        if self.alert_webhook_format not in ("tpwarden", "alertmanager"):
            problems.append(("alert_webhook_format", "must be tpwarden or alertmanager"))
        if not self.state_dir:
            problems.append(("state_dir", "must be set"))
        if problems:
            key, msg = problems[0]
            raise ConfigError(msg, key=f"watchdog.{key}", hint="fix the watchdog settings")

    @property
    def stall_window_s(self) -> float:
        return self.stall_after_s if self.stall_after_s is not None else self.timeout_s

    @property
    def boot_cap_s(self) -> float:
        return self.boot_max_s if self.boot_max_s is not None else 2 * self.boot_deadline_s

    @property
    def state_path(self) -> str:
        return os.path.join(self.state_dir, "state.json")

    @property
    def events_path(self) -> str:
        return os.path.join(self.state_dir, "events.jsonl")

    @property
    def lock_path(self) -> str:
        return os.path.join(self.state_dir, "watchdog.lock")

    @property
    def hold_path(self) -> str:
        return hold_path(self.state_dir)

    @classmethod
    def from_spec(
        cls,
        spec: WatchdogSpec,
        *,
        probe_url: str,
        model: str | None = None,
        api_key: str | None = None,
        restart_lock_path: str | None = None,
        state_dir: str | None = None,
        **overrides: object,
    ) -> WatchdogConfig:
        """Build from a `WatchdogSpec` (read by attribute name) plus caller-resolved values."""
        fields = {f.name for f in dataclasses.fields(cls)}
        spec_names = (
            "interval_s",
            "timeout_s",
            "failures",
            "boot_deadline_s",
            "max_restarts",
            "restart_window_s",
            "alert_command",
            "alert_webhook",
            "alert_webhook_format",
            "metrics_host",
            "metrics_port",
            "state_dir",
        )
        values: JSONObject = {}
        for name in spec_names:
            if hasattr(spec, name):
                values[name] = getattr(spec, name)
        if values.get("alert_command") is not None:
            values["alert_command"] = tuple(values["alert_command"])
        if state_dir is not None:
            values["state_dir"] = state_dir
        values.update(probe_url=probe_url.rstrip("/"), model=model, api_key=api_key)
        values["restart_lock_path"] = restart_lock_path
        if "timeout_s" in values:
            # Reading /metrics after a timed-out probe must not take longer than the probe itself
            # (a hung server would otherwise stretch every tick by the full default).
            values["metrics_timeout_s"] = min(cls.metrics_timeout_s, float(values["timeout_s"]))
        unknown = set(overrides) - fields
        if unknown:
            raise ConfigError(f"unknown watchdog setting(s): {sorted(unknown)}", key="watchdog")
        values.update(overrides)
        if "state_dir" not in values:
            raise ConfigError("state_dir is not set", key="watchdog.state_dir")
        return cls(**values)


SECRET_SETTINGS = ("api_key", "alert_webhook")  # never in an event: only that they changed


def config_changes(old: WatchdogConfig, new: WatchdogConfig) -> JSONObject:
    """Every setting that differs, as ``name -> [old, new]`` (a secret as ``"changed"``), for
    the ``plan_changed`` event: which of the watchdog's settings a new applied plan moved."""
    changes: JSONObject = {}
    for f in dataclasses.fields(old):
        before, after = getattr(old, f.name), getattr(new, f.name)
        if f.name == "config_hash" or before == after:
            continue
        if f.name in SECRET_SETTINGS:
            changes[f.name] = "changed"
        elif f.name == "report":
            changes[f.name] = [dataclasses.asdict(v) if v else None for v in (before, after)]
        else:
            changes[f.name] = [list(v) if isinstance(v, tuple) else v for v in (before, after)]
    return changes
