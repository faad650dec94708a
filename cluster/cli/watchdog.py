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

import getpass
import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
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
from servectl.cluster.errors import ConfigError, ServectlError
from servectl.watchdog.config import MAX_HOLD_S, WatchdogConfig
from servectl.watchdog.events import EventLog, read_events
from servectl.watchdog.state import StateStore, lock_holder, read_hold, write_hold, write_release

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

    def __init__(self, spec: Any, control_state_dir: str | None = None) -> None:
        from servectl.cluster.control import Controller

        self.spec = spec
        self.control_state_dir = control_state_dir
        self.controller = Controller(spec, state_dir=control_state_dir, node_timeout_s=10.0)

    def restart(self, reason: str, evidence: dict[str, Any]) -> None:
        why = f"watchdog: {reason}"
        source = getattr(self.spec, "source_file", None)
        if not source or not os.path.isfile(source):
            # No inventory file to hand a child (a spec built in memory): restart in-process.
            result = self.controller.restart(why=why, wait_ready=False, who=WATCHDOG_WHO)
            _raise_unless_applied(_result_doc(result, self.spec))
            return
        argv = [sys.executable, "-m", "servectl.cluster.cli.watchdog", "restart-job", source, why]
        if self.control_state_dir:
            argv.append(str(self.control_state_dir))
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
        return self.controller.boot_progress()

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


def restart_job(inventory: str, why: str, control_state_dir: str | None = None) -> int:
    """The restart the watchdog runs as a child: `Controller.restart(wait_ready=False)`; prints
    one JSON line (the result) and returns the exit status (0 applied, 1 failed, 2 error)."""
    from servectl.cluster.control import Controller

    try:
        spec = load(Path(inventory))
        with Controller(spec, state_dir=control_state_dir) as ctl:
            doc = _result_doc(ctl.restart(why=why, wait_ready=False, who=WATCHDOG_WHO), spec)
    except Exception as exc:  # noqa: BLE001 - reported to the waiting daemon as data
        doc = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(doc), flush=True)
        return 2
    print(json.dumps(doc), flush=True)
    return 0 if doc["ok"] else 1


def build_actuator(spec: Any, control_state_dir: str | None = None) -> ControllerActuator:
    """THE single place that binds the watchdog to cluster control. `control_state_dir`: where
    cluster control keeps events.jsonl/boots.jsonl (default: servectl's, as for an operator)."""
    return ControllerActuator(spec, control_state_dir)


def build_config(spec: Any, state_dir: str | None = None) -> WatchdogConfig:
    """Resolve probe target, model, API key and the cluster restart lock from the ClusterSpec."""
    api_key = None
    ref = getattr(spec.secrets, "api_key", None)
    if ref is not None and ref.env:
        api_key = os.environ.get(ref.env)
    # A key kept only in a file on the nodes is not readable here: the probe then gets 401 and
    # the watchdog alerts "misconfig" once (it never restarts for it).
    sd = state_dir or spec.watchdog.state_dir
    lock = os.path.join(os.path.dirname(os.path.abspath(sd)), f"restart-{spec.name}.lock")
    return WatchdogConfig.from_spec(
        spec.watchdog,
        probe_url=spec.api_base,
        model=spec.serving.model.served_name,
        api_key=api_key,
        restart_lock_path=lock,
        state_dir=sd,
    )


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
        doc["hold"] = {"until": hold.until, "reason": hold.reason, "by": hold.by}
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
    if doc["hold"]:
        text += f", held until {_iso(doc['hold']['until'])}: {doc['hold']['reason']}"
    return doc, text


# ---- commands ----------------------------------------------------------------------------------
@app.command("run")
@handle_errors
def run(
    inventory: InventoryOption = DEFAULT_INVENTORY,
    state_dir: StateDirOption = None,
    verbose: Annotated[bool, typer.Option("-v", help="Debug logging.")] = False,
) -> None:
    """Run the watchdog in the foreground until SIGTERM/SIGINT."""
    from servectl.watchdog.daemon import build_watchdog

    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    spec = load(inventory)
    cfg = build_config(spec, str(state_dir) if state_dir else None)
    wd = build_watchdog(cfg, build_actuator(spec))
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


if (
    __name__ == "__main__"
):  # the restart job: python -m servectl.cluster.cli.watchdog restart-job ...
    if len(sys.argv) >= 4 and sys.argv[1] == "restart-job":
        sys.exit(restart_job(*sys.argv[2:5]))
    sys.exit(
        "usage: python -m servectl.cluster.cli.watchdog restart-job INVENTORY WHY [CONTROL_STATE_DIR]"
    )
