"""Typed watchdog settings, built from the settings validated once at the edge.

`WatchdogConfig` carries every field of the inventory's `WatchdogSpec` (same names) plus what the
caller resolves from the cluster spec: the probe's base URL, the served model name, the API key and
the cluster-wide restart lock path. `from_spec()` builds it from a validated `WatchdogSpec`; the
fields it shares with `WatchdogSpec` take their defaults from it (`SPEC_DEFAULTS`), so there is
one set of default numbers (probe every 120 s, 3 failures, timeout 120 s, boot deadline 2400 s).
Nothing is validated here a second time: `WatchdogSpec` did it (issue 31, item 3). A direct
construction (tests, the scaled-clock bench) is trusted as written.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Literal

from tpwarden.cluster.durable import THERMAL_DIR, JSONObject
from tpwarden.cluster.errors import ConfigError
from tpwarden.cluster.hold import hold_path
from tpwarden.cluster.settings import WatchdogSpec

# Bounds for the policy knobs that are not (yet) part of WatchdogSpec.
DEFAULT_BOOT_EXTEND_S = 300.0  # each visible boot-progress change buys at most this much time
# The RESTARTING phase ends by this deadline whatever happened to the restart (the actuator
# waits up to 1800 s for the restart job; past this the policy counts it as a failed restart).
RESTART_DEADLINE_S = 1900.0

# The settings WatchdogConfig shares with WatchdogSpec (same names) and their one set of defaults:
# the inventory field's (`alert_webhook` is resolved by the caller when it is a reference).
SPEC_NAMES = (
    "interval_s",
    "timeout_s",
    "failures",
    "boot_deadline_s",
    "max_restarts",
    "restart_window_s",
    "alert_command",
    "alert_webhook",
    "alert_webhook_format",
    "alert_on_restart",
    "metrics_host",
    "metrics_port",
    "state_dir",
)
SPEC_DEFAULTS: JSONObject = {name: WatchdogSpec.model_fields[name].default for name in SPEC_NAMES}


@dataclass(frozen=True, kw_only=True)
class ReportConfig:
    """The daily morning report (inventory `tpwarden.report`, issue 31): posted to the alert
    hooks at `deliver_at` (HH:MM in `tz`), covering the `window_h` hours before. Thermal files
    are read from `thermal_dir` on the watchdog's host (the head's own agent writes there), and
    `nodes` names every node, so the report can say whose thermal files it did not have."""

    deliver_at: str
    tz: str = "UTC"
    window_h: float = 12.0
    thermal_dir: str = THERMAL_DIR  # tpwarden.thermal.dir
    nodes: tuple[str, ...] = ()
    ledger: str | None = None  # the configuration ledger on the watchdog's host (its canaries)


@dataclass(frozen=True, kw_only=True)
class WatchdogConfig:
    """Everything the probe, the policy and the daemon need. Times are seconds."""

    probe_url: str
    state_dir: str
    interval_s: float = SPEC_DEFAULTS["interval_s"]
    timeout_s: float = SPEC_DEFAULTS["timeout_s"]
    failures: int = SPEC_DEFAULTS["failures"]
    boot_deadline_s: float = SPEC_DEFAULTS["boot_deadline_s"]
    max_restarts: int = SPEC_DEFAULTS["max_restarts"]
    restart_window_s: float = SPEC_DEFAULTS["restart_window_s"]
    alert_command: tuple[str, ...] | None = SPEC_DEFAULTS["alert_command"]
    # often carries a token
    alert_webhook: str | None = field(default=SPEC_DEFAULTS["alert_webhook"], repr=False)
    # tpwarden's incident record or Alertmanager's webhook payload (version 4)
    alert_webhook_format: Literal["tpwarden", "alertmanager"] = SPEC_DEFAULTS[
        "alert_webhook_format"
    ]
    metrics_host: str = SPEC_DEFAULTS["metrics_host"]
    metrics_port: int = SPEC_DEFAULTS["metrics_port"]
    model: str | None = None
    api_key: str | None = field(default=None, repr=False)
    restart_lock_path: str | None = None
    # Policy refinements (defaults derived from the fields above when left as None).
    stall_after_s: float | None = None  # flat counters for this long make a timeout a stall
    boot_extend_s: float = DEFAULT_BOOT_EXTEND_S
    boot_max_s: float | None = None  # hard cap on an extended boot; default 2 x boot_deadline_s
    busy_alert_s: float = 1800.0  # continuous "busy" timeouts this long -> alert (never restart)
    metrics_timeout_s: float = 10.0
    # also notify (once per incident) when a restart is made
    alert_on_restart: bool = SPEC_DEFAULTS["alert_on_restart"]
    blind_realert_s: float = 3600.0  # while every probe gets 401/404: alert again this often
    crash_backoff_s: float = 60.0  # retry delay after a boot that failed (doubles per failure)
    max_boot_failures: int = 2  # consecutive failed boots (deadline or crash) -> give up
    alert_retry_max_s: float = 900.0  # undelivered alerts are retried with backoff up to this
    restart_deadline_s: float = RESTART_DEADLINE_S  # a restart still "in progress" after this fails
    events_max_bytes: int = 64 * 1024 * 1024  # events.jsonl rotates to events.jsonl.1 past this
    config_hash: str | None = None  # the applied plan this config was built from
    report: ReportConfig | None = None  # the daily morning report; None: not delivered

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
        alert_webhook: str | None = None,
        **overrides: object,
    ) -> WatchdogConfig:
        """Build from a validated `WatchdogSpec` plus caller-resolved values. `alert_webhook`
        is the resolved URL (the spec may hold a reference to it, `wiring.resolve_webhook`);
        left None, the spec's own URL is used (an unresolved reference is a ConfigError)."""
        values: JSONObject = {name: getattr(spec, name) for name in SPEC_NAMES}
        if spec.alert_command is not None:
            values["alert_command"] = tuple(spec.alert_command)
        if alert_webhook is not None:
            values["alert_webhook"] = alert_webhook
        elif spec.alert_webhook is not None and not isinstance(spec.alert_webhook, str):
            raise ConfigError(
                "the alert webhook is a reference that was not resolved",
                key="watchdog.alert_webhook",
                hint="pass the URL read by tpwarden.watchdog.wiring.resolve_webhook",
            )
        if state_dir is not None:
            values["state_dir"] = state_dir
        values.update(probe_url=probe_url.rstrip("/"), model=model, api_key=api_key)
        values["restart_lock_path"] = restart_lock_path
        # Reading /metrics after a timed-out probe must not take longer than the probe itself
        # (a hung server would otherwise stretch every tick by the full default).
        values["metrics_timeout_s"] = min(cls.metrics_timeout_s, float(spec.timeout_s))
        unknown = set(overrides) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise ConfigError(f"unknown watchdog setting(s): {sorted(unknown)}", key="watchdog")
        values.update(overrides)
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
