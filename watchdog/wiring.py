"""What a watchdog watches: its settings, prober and actuator, built from a cluster plan.

`build_config` resolves the probe's target, model, API key and the cluster restart lock from a
`ClusterSpec`; `watched_plan` picks the plan `tpwarden watchdog run` starts on (the applied
plan, else the inventory) and the `PlanFollower` that rebuilds all three when it changes.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path

from tpwarden.cluster.control.applied import AppliedPlan, local_paths, read_applied
from tpwarden.cluster.errors import ConfigError
from tpwarden.cluster.inventory.load import load_inventory
from tpwarden.cluster.ledger.record import ledger_file
from tpwarden.cluster.operator_lock import cluster_lock_path
from tpwarden.cluster.secrets import resolve_secret
from tpwarden.cluster.settings import SecretRef, http_url
from tpwarden.cluster.spec import ClusterSpec
from tpwarden.cluster.ssh.identity import SshIdentity
from tpwarden.cluster.vllm.probe import Prober
from tpwarden.watchdog.actuator import ControllerActuator, build_actuator
from tpwarden.watchdog.config import ReportConfig, WatchdogConfig
from tpwarden.watchdog.plan import PlanFollower, wait_for_applied


def _read_text(path: str) -> str:
    return Path(path).read_text()


def _read_here(
    ref: SecretRef, what: str, key: str, hint: str, environ: Mapping[str, str] | None
) -> str:
    """A secret read where the watchdog runs: from its environment (`environ`, default the
    process's) or a file on its host; ConfigError naming `what`, the setting `key` and the fix."""
    return resolve_secret(
        ref,
        read_file=_read_text,
        environ=os.environ if environ is None else environ,
        what=what,
        where="where the watchdog runs",
        key=key,
        hint=hint,
    )


def resolve_api_key(ref: SecretRef | None, environ: Mapping[str, str] | None = None) -> str | None:
    """The probe's API key from its reference, or ConfigError when it cannot be resolved here.

    A watchdog that probes without the configured key gets 401 on every probe: it cannot see a
    hang any more (issue 15: 12 h of a hung engine, 0 restarts). So it refuses to start instead,
    also for an empty key. `file:` is read where the watchdog runs (the provisioned one runs on
    the head node, where the root-only key file lives).
    """
    if ref is None:
        return None
    field = "secrets.api_key.env" if ref.env else "secrets.api_key.file"
    hint = (
        f"export {ref.env} for the watchdog (systemd: EnvironmentFile=), or the probe gets "
        "401 and the watchdog is blind"
        if ref.env
        else "run the watchdog where the key file is (the head node, as provisioned) "
        "with permission to read it"
    )
    value = _read_here(ref, "the API key", field, hint, environ)
    if not value:
        raise ConfigError(f"the API key ({ref.env or ref.file}) is empty", key=field)
    return value


def resolve_webhook(
    value: str | SecretRef | None, environ: Mapping[str, str] | None = None
) -> str | None:
    """The alert webhook URL: as written, or read from its reference where the watchdog runs
    (the URL often carries a token). ConfigError when it cannot be read or is not an http(s)
    URL, so the watchdog does not start with alerts that could never be sent."""
    if not isinstance(value, SecretRef):
        return value
    key = "watchdog.alert_webhook." + ("env" if value.env else "file")
    hint = "the watchdog reads the webhook URL from its own environment or host"
    url = _read_here(value, "the alert webhook", key, hint, environ)
    try:
        return http_url(url)
    except ValueError as exc:
        raise ConfigError(
            f"the alert webhook ({value.env or value.file}): {exc}", key=key
        ) from None


def build_config(
    spec: ClusterSpec, state_dir: str | None = None, environ: Mapping[str, str] | None = None
) -> WatchdogConfig:
    """Resolve probe target, model, API key, alert webhook and the cluster restart lock from the
    ClusterSpec."""
    api_key = resolve_api_key(getattr(spec.secrets, "api_key", None), environ)
    webhook = resolve_webhook(getattr(spec.watchdog, "alert_webhook", None), environ)
    sd = state_dir or spec.watchdog.state_dir
    lock = cluster_lock_path(spec, sd)
    return WatchdogConfig.from_spec(
        spec.watchdog,
        probe_url=spec.api_base,
        model=spec.serving.model.served_name,
        api_key=api_key,
        restart_lock_path=lock,
        state_dir=sd,
        config_hash=spec.config_hash(),
        alert_webhook=webhook,
        report=report_config(spec),
    )


def report_config(spec: ClusterSpec) -> ReportConfig | None:
    """The daily morning report from `tpwarden.report` (None when `deliver_at` is unset)."""
    report = spec.report
    if report.deliver_at is None:
        return None
    return ReportConfig(
        deliver_at=report.deliver_at,
        tz=report.tz,
        window_h=report.window_h,
        thermal_dir=spec.thermal.dir,
        nodes=tuple(n.name for n in spec.nodes),
        ledger=str(ledger_file(spec)),
    )


def watched_plan(
    inventory: Path,
    applied: str | None,
    state_dir: str | None,
    identity: SshIdentity = SshIdentity(),
) -> tuple[WatchdogConfig, ControllerActuator, PlanFollower]:
    """What `watchdog run` watches: (settings, actuator, plan follower).

    Probe target, key and policy come from the applied plan (`--applied`, or the control
    machine's record for the inventory's cluster; the inventory itself only when nothing was
    applied yet). Where this daemon keeps its state and serves /metrics, and the SSH key and
    known_hosts it reaches the nodes with (`identity`), are its own deployment: its unit
    (`--state-dir`, `--ssh-key`, `--known-hosts`) or the inventory it was started on.
    """
    plan: AppliedPlan | None
    if applied is not None:
        path = applied
        plan = wait_for_applied(path)
        spec = own = plan.spec()
    else:
        spec = own = load_inventory(inventory)
        path = local_paths(spec)[0]
        plan = read_applied(path)
        if plan is not None and plan.cluster == spec.name:
            spec = plan.spec()  # what runs, not what the inventory wants next
        else:
            plan = None
    mine = own.watchdog

    def here(c: WatchdogConfig) -> WatchdogConfig:  # /metrics where this daemon serves it
        return dataclasses.replace(
            c, metrics_host=mine.metrics_host, metrics_port=mine.metrics_port
        )

    cfg = here(build_config(spec, state_dir or own.watchdog.state_dir))

    def build(
        new_spec: ClusterSpec, _plan: AppliedPlan
    ) -> tuple[WatchdogConfig, Prober, ControllerActuator]:
        new_cfg = here(build_config(new_spec, cfg.state_dir))
        return new_cfg, Prober(new_cfg), build_actuator(new_spec, None, path, identity)

    follower = PlanFollower(path, plan, build, spec.name)
    return cfg, build_actuator(spec, None, path, identity), follower
