"""Operating the agents on every node over SSH: start/stop plans, status facts, latest samples.

Plan, then apply: ``plan_start``/``plan_stop`` are pure functions of the inventory and the
observed unit facts, returning typed steps (argv lists and file copies, never shell strings);
``apply`` runs them on all nodes in parallel. Facts are a command plus a pure parser
(``parse_units`` for ``systemctl show``, ``status_row`` for the node-side ``status`` JSON).
A node that cannot be reached is a row with a reason, never an exception out of these helpers.
"""

from __future__ import annotations

import json
import posixpath
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, TypeVar

from tpwarden.cluster.control.nodes import fan_out
from tpwarden.cluster.durable import JSONObject
from tpwarden.cluster.errors import NodeUnreachable, TpwardenError
from tpwarden.cluster.spec import ClusterSpec, NodeSpec, thermal_metrics_address
from tpwarden.cluster.ssh.gateway import NodeSession
from tpwarden.node.thermal.roles import zone_label
from tpwarden.node.thermal.zones import critical_trip_c

AGENT_PATH = "/var/lib/tpwarden/thermal-agent.pyz"
TRANSIENT_UNIT = "tpwarden-thermal-agent.service"
TRANSIENT_FRAGMENT = "/run/systemd/transient/" + TRANSIENT_UNIT
PERMANENT_UNIT = "tpwarden-thermal.service"  # installed by provisioning
TAIL_BYTES = 32 * 1024
T = TypeVar("T")


# -- facts ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class UnitFacts:
    load_state: str = "not-found"
    active_state: str = "inactive"
    sub_state: str = "dead"
    main_pid: int = 0
    restarts: int = 0

    @property
    def loaded(self) -> bool:
        return self.load_state == "loaded"

    @property
    def active(self) -> bool:
        return self.active_state in ("active", "activating", "reloading")

    @property
    def needs_stop(self) -> bool:
        """Running, or still stopping: a stop issued a moment ago (an earlier `thermal stop`
        whose SSH call gave up first) leaves the unit `deactivating`, and systemd-run then refuses
        the name ("already loaded"). `systemctl stop` waits until it is down."""
        return self.active or self.active_state == "deactivating"


def units_argv() -> list[str]:
    return ["systemctl", "show", "-p", "Id,LoadState,ActiveState,SubState,MainPID,NRestarts",
            "--", PERMANENT_UNIT, TRANSIENT_UNIT]  # fmt: skip


def parse_units(text: str) -> dict[str, UnitFacts]:
    """``systemctl show`` output (blocks of KEY=VALUE per unit) -> unit id -> facts."""
    out: dict[str, UnitFacts] = {}
    for block in re.split(r"\n\s*\n", text.strip()):
        kv = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        if "Id" not in kv:
            continue
        out[kv["Id"]] = UnitFacts(
            load_state=kv.get("LoadState", "not-found"),
            active_state=kv.get("ActiveState", "inactive"),
            sub_state=kv.get("SubState", "dead"),
            main_pid=int(kv.get("MainPID") or 0),
            restarts=int(kv.get("NRestarts") or 0) if (kv.get("NRestarts") or "").isdigit() else 0,
        )
    return out


# -- plans ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Step:
    """One action on one node: run ``argv``, or copy the agent zipapp to ``put``."""

    what: str
    argv: tuple[str, ...] = ()
    put: str | None = None
    check: bool = True

    def render(self) -> str:
        return f"copy agent zipapp -> {self.put}" if self.put else shlex.join(self.argv)


@dataclass(frozen=True)
class NodePlan:
    node: str
    unit: str | None
    steps: tuple[Step, ...]


def agent_argv(spec: ClusterSpec, node: NodeSpec) -> list[str]:
    """The agent's command line on ``node`` (``spec`` is a ClusterSpec)."""
    th = spec.thermal
    budget_mb = float(th.disk_budget_mb)
    metrics_host, metrics_port = thermal_metrics_address(th, node)
    argv = [
        "python3", AGENT_PATH, "agent",
        "--node", node.name,
        "--dir", th.dir,
        "--interval", f"{th.interval_s:g}",
        "--metrics-port", str(metrics_port),
        "--metrics-host", metrics_host,
        "--role", node.role,
        "--alert-margin", f"{th.alert_margin_c:g}",
        "--budget-mb", f"{budget_mb:g}",
        "--max-file-mb", f"{min(64.0, budget_mb / 8):g}",
    ]  # fmt: skip
    for key, role in sorted(getattr(th, "zone_roles", {}).items()):
        argv += ["--zone-role", f"{key}={role}"]  # only when mapped: argv unchanged otherwise
    return argv


def plan_start(spec: ClusterSpec, node: NodeSpec, units: dict[str, UnitFacts]) -> NodePlan:
    """Permanent unit installed -> start it; else copy the zipapp and run a transient unit."""
    transient = units.get(TRANSIENT_UNIT, UnitFacts())
    steps: list[Step] = []
    if units.get(PERMANENT_UNIT, UnitFacts()).loaded:
        if transient.needs_stop:
            steps.append(Step("stop the transient agent", ("systemctl", "stop", TRANSIENT_UNIT)))
        steps.append(Step("start the installed unit", ("systemctl", "start", PERMANENT_UNIT)))
        return NodePlan(node.name, PERMANENT_UNIT, tuple(steps))
    steps += [
        Step("agent directory", ("mkdir", "-p", "--", posixpath.dirname(AGENT_PATH))),
        Step("copy the agent", put=AGENT_PATH + ".new"),
        Step("install the agent", ("mv", "-f", "--", AGENT_PATH + ".new", AGENT_PATH)),
    ]
    if transient.needs_stop:
        steps.append(Step("stop the running agent", ("systemctl", "stop", TRANSIENT_UNIT)))
    if transient.loaded:
        steps.append(Step("clear a failed unit", ("systemctl", "reset-failed", TRANSIENT_UNIT),
                          check=False))  # fmt: skip
        # A stopped transient unit is normally garbage-collected; where systemd cannot remove
        # its cgroup (seen in systemd-nspawn machines: "Failed to kill control group ...
        # Input/output error") it stays loaded from its fragment in /run/systemd/transient and
        # systemd-run refuses the name ("already loaded or has a fragment file"). The unit is
        # stopped by now, so its fragment is only a leftover: remove it and reload.
        steps.append(Step("forget a stopped transient unit",
                          ("rm", "-f", "--", TRANSIENT_FRAGMENT), check=False))  # fmt: skip
        steps.append(Step("reload systemd", ("systemctl", "daemon-reload")))
    steps.append(
        Step(
            "start the agent",
            ("systemd-run", "--unit", TRANSIENT_UNIT, "--description", "tpwarden thermal agent",
             "--property=Restart=on-failure", "--property=RestartSec=1",
             "--property=StartLimitIntervalSec=0", *agent_argv(spec, node)),
        )
    )  # fmt: skip
    return NodePlan(node.name, TRANSIENT_UNIT, tuple(steps))


def plan_stop(node: NodeSpec, units: dict[str, UnitFacts]) -> NodePlan:
    steps = [
        Step(f"stop {u}", ("systemctl", "stop", u))
        for u in (PERMANENT_UNIT, TRANSIENT_UNIT)
        if units.get(u, UnitFacts()).needs_stop
    ]
    if units.get(TRANSIENT_UNIT, UnitFacts()).load_state == "loaded":
        steps.append(Step("forget the transient unit",
                          ("systemctl", "reset-failed", TRANSIENT_UNIT), check=False))  # fmt: skip
    return NodePlan(node.name, None, tuple(steps))


# -- fan-out --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class NodeCall(Generic[T]):
    """One node's answer to a fan-out call: its value, or why there is none."""

    node: str
    ok: bool
    value: T | None = None
    error: str | None = None
    unreachable: bool = False


def call_each_node(nodes: Sequence[NodeSpec], fn: Callable[[NodeSpec], T]) -> list[NodeCall[T]]:
    """``fn(node)`` on every node in parallel (cluster control's one fan-out), as one row per
    node in the given order: tpwarden and OS errors fail the row, a dead node or transport
    (anything else) marks it unreachable."""

    def one(node: NodeSpec) -> NodeCall[T]:
        try:
            return NodeCall(node.name, True, fn(node))
        except NodeUnreachable as exc:
            return NodeCall(node.name, False, error=exc.reason, unreachable=True)
        except (TpwardenError, OSError) as exc:
            return NodeCall(node.name, False, error=str(exc))
        except Exception as exc:  # noqa: BLE001 - e.g. a transport dying mid-SFTP: one node's row
            return NodeCall(
                node.name, False, error=f"{type(exc).__name__}: {exc}", unreachable=True
            )

    calls = fan_out(nodes, one)  # `one` never raises, and no deadline: every value is a row
    return [
        call if isinstance(call, NodeCall) else NodeCall(node.name, False, error=str(call))
        for node, call in ((n, calls[n.name]) for n in nodes)
    ]


def read_units(session: NodeSession, timeout_s: float) -> dict[str, UnitFacts]:
    return parse_units(session.run(units_argv(), timeout=timeout_s, check=True).stdout)


def apply_plan(session: NodeSession, plan: NodePlan, zipapp: Path, timeout_s: float) -> list[str]:
    """Run a node's steps in order; returns what was done. Raises on the first failed step."""
    done: list[str] = []
    for step in plan.steps:
        if step.put:
            session.put(str(zipapp), step.put, mode=0o644)
        else:
            session.run(list(step.argv), timeout=timeout_s, sudo=True, check=step.check)
        done.append(step.what)
    return done


# -- status ---------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class StatusRow:
    node: str
    reachable: bool
    reason: str | None = None
    unit: str | None = None
    running: bool = False
    state: str = "-"
    restarts: int = 0
    last_sample_age_s: float | None = None
    samples_today: int | None = None
    bytes_used: int | None = None
    budget_bytes: int | None = None
    dropped_today: int | None = None
    errors_in_latest: tuple[str, ...] = field(default_factory=tuple)


def status_row(
    node: str, units: dict[str, UnitFacts], doc: JSONObject | None, budget_bytes: int
) -> StatusRow:
    """Pure: unit facts + the node-side status JSON -> one row."""
    perm, trans = units.get(PERMANENT_UNIT, UnitFacts()), units.get(TRANSIENT_UNIT, UnitFacts())
    unit: str | None
    unit, facts = (
        (PERMANENT_UNIT, perm) if perm.active or not trans.loaded else (TRANSIENT_UNIT, trans)
    )
    if not facts.loaded and not perm.loaded:
        unit = None
    latest = (doc or {}).get("latest") or None
    age = None
    if latest and isinstance(latest.get("ts"), int | float) and doc:
        age = round(max(0.0, float(doc["now"]) - float(latest["ts"])), 1)
    errors = tuple(
        f"{e.get('source')}: {e.get('error')}" for e in (latest or {}).get("errors") or []
    )
    return StatusRow(
        node=node,
        reachable=True,
        reason=(doc or {}).get("error"),
        unit=unit,
        running=facts.active,
        state=f"{facts.active_state}/{facts.sub_state}" if unit else "not running",
        restarts=facts.restarts,
        last_sample_age_s=age,
        samples_today=(doc or {}).get("samples_today"),
        bytes_used=(doc or {}).get("bytes_used"),
        budget_bytes=budget_bytes,
        dropped_today=(doc or {}).get("dropped_today"),
        errors_in_latest=errors,
    )


def node_status_doc(session: NodeSession, spec: ClusterSpec, node: NodeSpec,
                    zipapp: Callable[[], Path], timeout_s: float) -> JSONObject:  # fmt: skip
    """Run the node-side ``status`` (the installed zipapp, else a temporary copy)."""
    args = ["status", "--node", node.name, "--dir", spec.thermal.dir]
    if session.exists(AGENT_PATH):
        res = session.run(["python3", AGENT_PATH, *args], timeout=timeout_s, check=True)
    else:
        res = session.run_script(str(zipapp()), args, interpreter=["python3"],
                                 timeout=timeout_s, check=True)  # fmt: skip
    doc: JSONObject = json.loads(res.stdout)
    return doc


# -- latest sample, for watch ---------------------------------------------------------------------
_FILE = re.compile(r"thermal-(?P<node>.+)-(?P<day>\d{8})(?:-(?P<n>\d+))?\.jsonl")


def newest_file(names: Sequence[str], node: str) -> str | None:
    keyed = []
    for name in names:
        m = _FILE.fullmatch(name)
        if m and m["node"] == node:
            keyed.append((m["day"], int(m["n"] or 0), name))
    return max(keyed)[2] if keyed else None


def last_record(data: bytes) -> JSONObject | None:
    """The last whole JSON line of a file's tail (a torn last line is skipped)."""
    for raw in reversed(data.split(b"\n")):
        if raw.strip():
            try:
                rec = json.loads(raw)
            except ValueError:
                continue
            if isinstance(rec, dict):
                return rec
    return None


def read_latest(
    session: NodeSession, directory: str, node: str, timeout_s: float
) -> JSONObject | None:
    """The newest record on the node: SFTP list + a read of the newest file's tail only."""
    sftp = session.sftp()
    chan = sftp.get_channel()
    if chan is not None:  # always, for a client made from a channel (Session.sftp)
        chan.settimeout(timeout_s)
    try:
        name = newest_file(sftp.listdir(directory), node)
        if name is None:
            return None
        with sftp.open(posixpath.join(directory, name), "rb") as f:
            size = f.stat().st_size or 0
            f.seek(max(0, size - TAIL_BYTES))
            return last_record(f.read(TAIL_BYTES))
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise NodeUnreachable(node, f"SFTP read of {directory}: {exc}") from None


@dataclass(frozen=True, kw_only=True)
class LiveRow:
    node: str
    age_s: float | None = None
    gpu_temp_c: float | None = None
    hottest_zone: str | None = None
    hottest_zone_c: float | None = None
    margin_c: float | None = None
    reasons: tuple[str, ...] = ()
    note: str | None = None


def live_row(
    node: str, rec: JSONObject | None, now: float, zone_roles: Mapping[str, str] | None = None
) -> LiveRow:
    """Pure: latest record -> GPU temp, hottest zone, its margin to critical, clock events.
    With ``zone_roles`` (thermal.zone_roles) the zone is named by its role (roles.py)."""
    if rec is None:
        return LiveRow(node=node, note="no samples yet")
    temps = [g.get("temp_c") for g in rec.get("gpus") or [] if g.get("temp_c") is not None]
    reasons = sorted({r for g in rec.get("gpus") or [] for r in g.get("clock_event_reasons") or []})
    best: tuple[float, str, float | None] | None = None
    for z in rec.get("zones") or []:
        t = z.get("temp_c")
        if t is None:
            continue
        crit = critical_trip_c(z.get("trips") or [])
        margin = round(crit - t, 1) if crit is not None else None
        if best is None or t > best[0]:
            label = z.get("type") or z.get("name") or "?"
            if zone_roles and z.get("name"):
                label = zone_label(z["name"], z.get("type"), zone_roles)
            best = (t, label, margin)
    errs = [e.get("error", "") for e in rec.get("errors") or []]
    return LiveRow(
        node=node,
        age_s=round(max(0.0, now - float(rec.get("ts", now))), 1),
        gpu_temp_c=max(temps) if temps else None,
        hottest_zone=best[1] if best else None,
        hottest_zone_c=best[0] if best else None,
        margin_c=best[2] if best else None,
        reasons=tuple(reasons),
        note="; ".join(errs) or None,
    )
