"""`servectl watchdog ...`: run the probe watchdog, show its state, hold and release it.

A thin layer: options, rendering (rich), exit codes. The work lives in `watchdog.*`; the daemon
owns `state.json`, the CLI only writes `hold.json` (atomic) and appends to `events.jsonl`.

Examples:
    servectl watchdog run -i inventory.yml
    servectl watchdog status --json
    servectl watchdog hold --for 30m --reason "k=3 rollout"
    servectl watchdog release
    servectl watchdog history --limit 50
"""

from __future__ import annotations

import dataclasses
import getpass
import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer
from rich.table import Table
from servectl.cluster.cli.common import (
    DEFAULT_INVENTORY,
    InventoryOption,
    JsonOption,
    console,
    handle_errors,
    load,
)
from servectl.cluster.durable import read_json
from servectl.cluster.errors import ConfigError, ServectlError
from servectl.cluster.operator_lock import cluster_lock_path
from servectl.cluster.ssh_identity import SshIdentity
from servectl.watchdog.config import MAX_HOLD_S, WatchdogConfig
from servectl.watchdog.events import EventLog, read_events
from servectl.watchdog.state import (
    StateStore,
    lock_holder,
    read_hold,
    write_hold,
    write_release,
)

app = typer.Typer(
    help="The probe watchdog: run it, see its state, hold or release it.", no_args_is_help=True
)

StateDirOption = Annotated[
    Path | None,
    typer.Option(
        "--state-dir", help="Watchdog state dir (default: the inventory's watchdog.state_dir)."
    ),
]


# ---- wiring: the watchdog's actuator is cluster control ------------------------------------
RESTART_JOB_TIMEOUT_S = 1800.0  # waiting for the restart job (removal + starts, not the boot)
EVIDENCE_LOG_LINES = 50
EVIDENCE_MAX_CHARS = 8000  # per node, and for the /metrics snapshot


class ControllerActuator:
    """`servectl.watchdog.daemon.Actuator` over `servectl.cluster.control.Controller`.

    * `restart()` is exactly an operator's `servectl restart --no-wait`: `Controller.restart()`
      (same plan, same `events.jsonl` record, who=servectl-watchdog), run in a detached child
      process (its own session) that this one waits for. A daemon killed with -9 mid-restart
      therefore never leaves a half-applied plan: the job finishes the restart, and the next
      daemon finds `restart_in_progress` and only verifies it in boot grace.
    * `boot_progress()` reads the head's container log (`Controller.boot_progress()`).
    * `collect_evidence()`: last log lines of every node and a `/metrics` snapshot.
    * `server_started_at()`: when the head's container started (fencing: a restart made by
      someone else since the failures began is not repeated).
    """

    def __init__(
        self,
        spec: Any,
        control_state_dir: str | None = None,
        applied_path: str | None = None,
        identity: SshIdentity = SshIdentity(),
    ) -> None:
        from servectl.cluster.control import Controller

        self.spec = identity.apply(spec)
        self.control_state_dir = control_state_dir
        self.applied_path = applied_path  # the plan a restart replays (not the inventory)
        self.identity = identity  # this host's SSH key and known_hosts, for the restart job too
        self.controller = Controller(self.spec, state_dir=control_state_dir, node_timeout_s=10.0)

    def restart(self, reason: str, evidence: dict[str, Any]) -> None:
        why = f"watchdog: {reason}"
        source = getattr(self.spec, "source_file", None)
        if self.applied_path and os.path.isfile(self.applied_path):
            source = self.applied_path
        if not source or not os.path.isfile(source):
            # No inventory file to hand a child (a spec built in memory): restart in-process.
            result = self.controller.restart(why=why, wait_ready=False, who=WATCHDOG_WHO)
            _raise_unless_applied(_result_doc(result, self.spec))
            return
        argv = [sys.executable, "-m", "servectl.cluster.cli.watchdog", "restart-job", source, why]
        if self.control_state_dir:
            argv.append(str(self.control_state_dir))
        argv += self.identity.argv()  # the plan is the control machine's; the SSH key is ours
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # survives a kill -9 of this daemon (and its signals)
            text=True,
        )
        try:
            out, err = proc.communicate(timeout=RESTART_JOB_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise ServectlError(
                f"restart job (pid {proc.pid}) still running after {RESTART_JOB_TIMEOUT_S:g}s"
            ) from None
        try:
            doc = json.loads(out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise ServectlError(
                f"restart job exited {proc.returncode} without a result: {err.strip()[-500:]}"
            ) from None
        _raise_unless_applied(doc)

    def boot_progress(self) -> Any:
        """The head's boot progress; failed as soon as any rank's container exited (a worker
        that died leaves the head waiting at the rendezvous until the boot deadline)."""
        from servectl.watchdog.policy import BootProgress

        progress = self.controller.boot_progress()
        if progress is not None and getattr(progress, "failed", False):
            return progress
        dead = self.controller._dead_containers()
        if dead and any("exited" in d for d in dead):
            return BootProgress("exited: " + "; ".join(dead)[:200], 0.0, failed=True)
        return progress

    def server_started_at(self) -> float | None:
        c = self.controller.head_container()
        return c.started_at.timestamp() if c is not None and c.started_at else None

    def collect_evidence(self) -> dict[str, Any]:
        lines = self.controller.last_log_lines(tail=EVIDENCE_LOG_LINES)
        doc: dict[str, Any] = {
            "last_log_lines": {k: v[-EVIDENCE_MAX_CHARS:] for k, v in lines.items()}
        }
        try:
            r = self.controller._http.get(f"{self.spec.api_base}/metrics", timeout=5.0)
            text = "\n".join(
                ln for ln in r.text.splitlines() if ln.startswith("vllm:") and "_bucket{" not in ln
            )
            doc["metrics"] = {"status_code": r.status_code, "text": text[:EVIDENCE_MAX_CHARS]}
        except httpx.HTTPError as exc:
            doc["metrics"] = {"error": f"{type(exc).__name__}: {exc}"}
        return doc

    def close(self) -> None:
        self.controller.close()


WATCHDOG_WHO = "servectl-watchdog"


def _result_doc(result: Any, spec: Any) -> dict[str, Any]:
    """ApplyResult -> JSON. `apply()` stops at the first failed wave, so nodes of later waves
    have no outcome at all: a node without an outcome is a failure too, not a silent pass."""
    outcomes = {o.node: {"ok": o.ok, "message": o.message} for o in result.outcomes}
    missing = [n.name for n in spec.nodes if n.name not in outcomes]
    return {
        "ok": bool(result.ok) and not missing,
        "config_hash": result.plan.config_hash,
        "outcomes": outcomes,
        "missing": missing,
    }


def _raise_unless_applied(doc: dict[str, Any]) -> None:
    if doc.get("ok"):
        return
    if doc.get("error"):
        raise ServectlError(f"restart failed: {doc['error']}")
    bad = [f"{n}: {o['message']}" for n, o in doc.get("outcomes", {}).items() if not o["ok"]]
    bad += [f"{n}: not started (an earlier wave failed)" for n in doc.get("missing", [])]
    raise ServectlError("restart failed on " + "; ".join(bad))


def restart_job(
    inventory: str,
    why: str,
    control_state_dir: str | None = None,
    identity: SshIdentity = SshIdentity(),
) -> int:
    """The restart the watchdog runs as a child: `Controller.restart(wait_ready=False)`; prints
    one JSON line (the result) and returns the exit status (0 applied, 1 failed, 2 error).
    `identity`: the watchdog's own SSH key and known_hosts (the record keeps the plan's)."""
    from servectl.cluster.applied import read_applied
    from servectl.cluster.control import Controller

    try:
        plan = read_applied(inventory) if inventory.endswith(".json") else None
        # The applied plan is replayed as recorded, whatever the inventory file says now.
        spec = identity.apply(plan.spec() if plan is not None else load(Path(inventory)))
        source = (plan.inventory_text, plan.inventory_path) if plan is not None else None
        with Controller(spec, state_dir=control_state_dir, applied_source=source) as ctl:
            doc = _result_doc(ctl.restart(why=why, wait_ready=False, who=WATCHDOG_WHO), spec)
    except Exception as exc:  # noqa: BLE001 - reported to the waiting daemon as data
        doc = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(doc), flush=True)
        return 2
    print(json.dumps(doc), flush=True)
    return 0 if doc["ok"] else 1


def build_actuator(
    spec: Any,
    control_state_dir: str | None = None,
    applied_path: str | None = None,
    identity: SshIdentity = SshIdentity(),
) -> ControllerActuator:
    """THE single place that binds the watchdog to cluster control. `control_state_dir`: where
    cluster control keeps events.jsonl/boots.jsonl (default: servectl's, as for an operator);
    `applied_path`: the applied plan a restart replays; `identity`: the SSH key and known_hosts
    of the host the watchdog runs on, in place of the plan's (which are the control machine's)."""
    return ControllerActuator(spec, control_state_dir, applied_path, identity)


def resolve_api_key(ref: Any, environ: Mapping[str, str] | None = None) -> str | None:
    """The probe's API key from its reference, or ConfigError when it cannot be resolved here.

    A watchdog that probes without the configured key gets 401 on every probe: it cannot see a
    hang any more (issue 15: 12 h of a hung engine, 0 restarts). So it refuses to start instead.
    `file:` is read where the watchdog runs (the provisioned one runs on the head node, where
    the root-only key file lives).
    """
    if ref is None:
        return None
    environ = os.environ if environ is None else environ
    if ref.env:
        value = environ.get(ref.env)
        if not value:
            raise ConfigError(
                f"the API key's variable {ref.env} is not set in the watchdog's environment",
                key="secrets.api_key.env",
                hint=f"export {ref.env} for the watchdog (systemd: EnvironmentFile=), or the "
                "probe gets 401 and the watchdog is blind",
            )
        return value
    try:
        value = Path(ref.file).read_text().strip()
    except OSError as exc:
        raise ConfigError(
            f"the API key file {ref.file} is not readable here ({exc.strerror or exc})",
            key="secrets.api_key.file",
            hint="run the watchdog where the key file is (the head node, as provisioned) "
            "with permission to read it",
        ) from None
    if not value:
        raise ConfigError(f"the API key file {ref.file} is empty", key="secrets.api_key.file")
    return value


def build_config(
    spec: Any, state_dir: str | None = None, environ: Mapping[str, str] | None = None
) -> WatchdogConfig:
    """Resolve probe target, model, API key and the cluster restart lock from the ClusterSpec."""
    api_key = resolve_api_key(getattr(spec.secrets, "api_key", None), environ)
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
    )


def watched_plan(
    inventory: Path,
    applied: str | None,
    state_dir: str | None,
    identity: SshIdentity = SshIdentity(),
) -> tuple[WatchdogConfig, ControllerActuator, Any]:
    """What `watchdog run` watches: (settings, actuator, plan follower).

    Probe target, key and policy come from the applied plan (`--applied`, or the control
    machine's record for the inventory's cluster; the inventory itself only when nothing was
    applied yet). Where this daemon keeps its state and serves /metrics, and the SSH key and
    known_hosts it reaches the nodes with (`identity`), are its own deployment: its unit
    (`--state-dir`, `--ssh-key`, `--known-hosts`) or the inventory it was started on.
    """
    from servectl.cluster.applied import local_paths, read_applied
    from servectl.cluster.watchdog_plan import PlanFollower, wait_for_applied
    from servectl.watchdog.probe import Prober

    if applied is not None:
        path = applied
        plan = wait_for_applied(path)
        spec = own = plan.spec()
    else:
        spec = own = load(inventory)
        path = local_paths(spec)[0]
        plan = read_applied(path)
        if plan is not None and plan.cluster == spec.name:
            spec = plan.spec()  # what runs, not what the inventory wants next
        else:
            plan = None
    here = {"metrics_host": own.watchdog.metrics_host, "metrics_port": own.watchdog.metrics_port}
    cfg = dataclasses.replace(build_config(spec, state_dir or own.watchdog.state_dir), **here)

    def build(new_spec: Any, _plan: Any) -> tuple[Any, Any, Any]:
        new_cfg = dataclasses.replace(build_config(new_spec, cfg.state_dir), **here)
        return new_cfg, Prober(new_cfg), build_actuator(new_spec, None, path, identity)

    follower = PlanFollower(path, plan, build, spec.name)
    return cfg, build_actuator(spec, None, path, identity), follower


# ---- helpers -----------------------------------------------------------------------------------
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhd])")


def parse_duration(text: str, option: str = "--for") -> float:
    """'30m', '2h', '1h30m', '90s', '1d' -> seconds."""
    text = text.strip().lower()
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise typer.BadParameter(f"{text!r}: use e.g. 30m, 2h, 1h30m, 90s", param_hint=option)
    return sum(float(n) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[u] for n, u in parts)


def _state_dir(state_dir: Path | None, inventory: Path) -> str:
    if state_dir is not None:
        return str(state_dir)
    return load(inventory).watchdog.state_dir


def _iso(ts: float | None) -> str:
    if ts is None:
        return "-"
    return datetime.fromtimestamp(ts, tz=UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _status_doc(sd: str) -> dict[str, Any]:
    state = StateStore(os.path.join(sd, "state.json")).load()
    hold, released = read_hold(os.path.join(sd, "hold.json"))
    now = time.time()
    doc: dict[str, Any] = {
        "state_dir": sd,
        "daemon": lock_holder(os.path.join(sd, "watchdog.lock")),
        "hold": None,
        "state": None,
    }
    if hold is not None and hold.until > now:
        doc["hold"] = {"until": hold.until, "reason": hold.reason, "by": hold.by, "kind": hold.kind}
    elif hold is not None:
        doc["hold_expired"] = {"until": hold.until, "reason": hold.reason, "by": hold.by}
    pending = (read_json(os.path.join(sd, "outbox.json")) or {}).get("pending") or []
    doc["undelivered_alerts"] = [
        {
            "category": p["incident"].get("category"),
            "attempts": p.get("attempts"),
            "next_attempt_at": p.get("next_at"),
            "problems": p.get("problems"),
        }
        for p in pending
        if isinstance(p, dict) and isinstance(p.get("incident"), dict)
    ]
    if state is not None:
        doc["state"] = {
            "phase": state.phase.value,
            "consecutive_failures": state.consecutive_failures,
            "last_probe": state.last_probe,
            "last_verdict": state.last_verdict,
            "last_ok_at": state.last_ok_at,
            "restart_times": list(state.restart_times),
            "restart_in_progress": state.restart_in_progress,
            "incident_id": state.incident_id,
            "boot_deadline_at": state.boot_deadline_at,
            "boot_failures": state.boot_failures,
            "updated_at": state.updated_at,
            "blind_since": state.blind_since,
        }
    return doc


def watchdog_line(state_dir: str) -> tuple[dict[str, Any] | None, str]:
    """For `servectl status`: the watchdog's state from `state_dir` on this machine (file reads
    only, never blocks) as (JSON doc or None, one line of text)."""
    try:
        doc = _status_doc(state_dir)
    except (OSError, ValueError, ServectlError) as exc:
        return None, f"watchdog: state unreadable in {state_dir} ({exc})"
    st = doc["state"]
    if st is None:
        return None, f"watchdog: no state in {state_dir}"
    lp = st["last_probe"] or {}
    running = "running" if doc["daemon"] else "[yellow]not running[/]"
    text = (
        f"watchdog: [bold]{st['phase']}[/] ({running}), {st['consecutive_failures']} failure(s), "
        f"last probe {lp.get('outcome', '-')}/{st['last_verdict'] or '-'} at {_iso(lp.get('at'))}, "
        f"{len(st['restart_times'])} restart(s) in window"
    )
    if doc["hold"] and doc["hold"]["kind"] == "down":
        text += f", [bold]intentional stop[/] ({doc['hold']['reason']}): no restart until `up`"
    elif doc["hold"]:
        text += f", held until {_iso(doc['hold']['until'])}: {doc['hold']['reason']}"
    if st["phase"] == "blind":
        text += f", [red]blind[/] since {_iso(st['blind_since'])} (probe rejected: key/model)"
    if doc["undelivered_alerts"]:
        text += f", [red]{len(doc['undelivered_alerts'])} alert(s) undelivered[/]"
    return doc, text


# ---- commands ----------------------------------------------------------------------------------
@app.command("run")
@handle_errors
def run(
    inventory: InventoryOption = DEFAULT_INVENTORY,
    state_dir: StateDirOption = None,
    applied: Annotated[
        Path | None,
        typer.Option(
            "--applied",
            help="Follow this applied-plan record (applied.json) instead of an inventory: what "
            "the provisioned watchdog does. Waits for the first `servectl up` if absent.",
        ),
    ] = None,
    ssh_key: Annotated[
        Path | None,
        typer.Option(
            "--ssh-key",
            exists=True,
            dir_okay=False,
            help="Private key for every node and jump host, in place of the plan's (which is "
            "the control machine's). The provisioned watchdog passes its own.",
        ),
    ] = None,
    known_hosts: Annotated[
        Path | None,
        typer.Option(
            "--known-hosts",
            exists=True,
            dir_okay=False,
            help="known_hosts file for every connection, in place of the plan's.",
        ),
    ] = None,
    verbose: Annotated[bool, typer.Option("-v", help="Debug logging.")] = False,
) -> None:
    """Run the watchdog in the foreground until SIGTERM/SIGINT. It watches and restarts the
    applied plan (what `up`/`restart`/`rollout` last applied), following it when it changes.
    As provisioned on the head node, it reaches the nodes with its own key and known_hosts
    (--ssh-key, --known-hosts), not the control machine's that the plan names."""
    from servectl.watchdog.daemon import build_watchdog

    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    identity = SshIdentity(
        str(ssh_key) if ssh_key else None, str(known_hosts) if known_hosts else None
    )
    cfg, actuator, follower = watched_plan(
        inventory,
        str(applied) if applied else None,
        str(state_dir) if state_dir else None,
        identity,
    )
    wd = build_watchdog(cfg, actuator, follow=follower)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: wd.stop())
    console.print(
        f"watchdog: probing {cfg.probe_url} every {cfg.interval_s:g}s "
        f"(timeout {cfg.timeout_s:g}s, {cfg.failures} failures), state in {cfg.state_dir}, "
        f"/metrics on {cfg.metrics_host}:{cfg.metrics_port}"
    )
    wd.run()


@app.command("status")
@handle_errors
def status(
    inventory: InventoryOption = DEFAULT_INVENTORY,
    state_dir: StateDirOption = None,
    as_json: JsonOption = False,
) -> None:
    """State, consecutive failures, last probe, restarts used of the budget, hold."""
    sd = _state_dir(state_dir, inventory)
    doc = _status_doc(sd)
    if as_json:
        console.print_json(json.dumps(doc))
        return
    st = doc["state"]
    if st is None:
        console.print(f"no watchdog state in {sd} (never run?)")
        raise typer.Exit(1)
    t = Table(show_header=False, box=None)
    t.add_row("phase", f"[bold]{st['phase']}[/]")
    t.add_row("daemon", "running" if doc["daemon"] else "[yellow]not running[/]")
    t.add_row("consecutive failures", str(st["consecutive_failures"]))
    lp = st["last_probe"] or {}
    t.add_row(
        "last probe",
        f"{lp.get('outcome', '-')} ({st['last_verdict'] or '-'}) "
        f"{lp.get('latency_s', '-')}s at {_iso(lp.get('at'))} {lp.get('detail', '')}",
    )
    t.add_row("last OK", _iso(st["last_ok_at"]))
    t.add_row("restarts in window", str(len(st["restart_times"])))
    if st["boot_deadline_at"]:
        t.add_row("boot deadline", _iso(st["boot_deadline_at"]))
    if st["incident_id"]:
        t.add_row("incident", st["incident_id"])
    h = doc["hold"]
    t.add_row("hold", f"until {_iso(h['until'])} by {h['by']}: {h['reason']}" if h else "none")
    if h and h["kind"] == "down":
        t.add_row("", "[bold]intentional stop[/]: no restart until `servectl up`")
    if doc.get("hold_expired"):
        e = doc["hold_expired"]
        t.add_row("hold expired", f"at {_iso(e['until'])} ({e['reason']}), never released")
    if st["phase"] == "blind":
        t.add_row("blind since", _iso(st["blind_since"]))
    for a in doc["undelivered_alerts"]:
        t.add_row(
            "alert undelivered",
            f"{a['category']}: {a['attempts']} attempt(s), next at {_iso(a['next_attempt_at'])}: "
            f"{'; '.join(a['problems'] or [])}",
        )
    console.print(t)


@app.command("hold")
@handle_errors
def hold(
    duration: Annotated[str, typer.Option("--for", help="How long, e.g. 30m, 2h (max 7d).")],
    reason: Annotated[str, typer.Option("--reason", help="Why (recorded in the event log).")],
    inventory: InventoryOption = DEFAULT_INVENTORY,
    state_dir: StateDirOption = None,
) -> None:
    """Suppress automatic restarts for a limited time (probing and recording continue)."""
    seconds = parse_duration(duration)
    if not 0 < seconds <= MAX_HOLD_S:
        raise ConfigError(f"hold of {duration} is out of range (max 7d)", key="--for")
    sd = _state_dir(state_dir, inventory)
    now, who = time.time(), getpass.getuser()
    write_hold(os.path.join(sd, "hold.json"), until=now + seconds, reason=reason, by=who, now=now)
    EventLog(os.path.join(sd, "events.jsonl"), time.time).append(
        "hold_set", until=now + seconds, reason=reason, by=who
    )
    console.print(f"restarts held until {_iso(now + seconds)}: {reason}")


@app.command("release")
@handle_errors
def release(
    inventory: InventoryOption = DEFAULT_INVENTORY, state_dir: StateDirOption = None
) -> None:
    """End an operator hold, and re-arm restarts after an automatic hold or give-up."""
    sd = _state_dir(state_dir, inventory)
    now, who = time.time(), getpass.getuser()
    write_release(os.path.join(sd, "hold.json"), by=who, now=now)
    EventLog(os.path.join(sd, "events.jsonl"), time.time).append("hold_released", by=who)
    console.print("released: automatic restarts re-armed (takes effect at the next probe)")


@app.command("history")
@handle_errors
def history(
    inventory: InventoryOption = DEFAULT_INVENTORY,
    state_dir: StateDirOption = None,
    limit: Annotated[int, typer.Option(min=1, help="Last N events.")] = 50,
    probes: Annotated[bool, typer.Option(help="Include every probe record.")] = False,
    as_json: JsonOption = False,
) -> None:
    """Events from events.jsonl: decisions, restarts (with evidence), alerts, holds."""
    sd = _state_dir(state_dir, inventory)
    got = read_events(os.path.join(sd, "events.jsonl"))
    events = [e for e in got.events if probes or e.get("kind") != "probe"][-limit:]
    if as_json:
        console.print_json(
            json.dumps({"events": events, "skipped_lines": got.skipped_lines}, default=str)
        )
        return
    t = Table("time", "event", "detail")
    for e in events:
        detail = {k: v for k, v in e.items() if k not in ("ts", "kind", "evidence", "metrics")}
        t.add_row(_iso(e.get("ts")), str(e.get("kind")), json.dumps(detail, default=str)[:160])
    console.print(t)
    if got.skipped_lines:
        console.print(f"[yellow]{got.skipped_lines} unreadable line(s) skipped[/]")


def _restart_job_main(argv: list[str]) -> int:
    """`restart-job INVENTORY WHY [CONTROL_STATE_DIR] [--ssh-key P] [--known-hosts P]`."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m servectl.cluster.cli.watchdog restart-job")
    parser.add_argument("inventory")
    parser.add_argument("why")
    parser.add_argument("control_state_dir", nargs="?")
    parser.add_argument("--ssh-key")
    parser.add_argument("--known-hosts")
    args = parser.parse_args(argv)
    identity = SshIdentity(args.ssh_key, args.known_hosts)
    return restart_job(args.inventory, args.why, args.control_state_dir, identity)


if __name__ == "__main__":  # the restart job: python -m servectl.cluster.cli.watchdog restart-job
    if len(sys.argv) >= 4 and sys.argv[1] == "restart-job":
        sys.exit(_restart_job_main(sys.argv[2:]))
    sys.exit(
        "usage: python -m servectl.cluster.cli.watchdog restart-job INVENTORY WHY "
        "[CONTROL_STATE_DIR] [--ssh-key PATH] [--known-hosts PATH]"
    )
