"""`tpwarden status`: observations per node and for the server, and a pure verdict.

`derive_verdict` is a pure function of the observations (design principle 5). The gathering
lives in `tpwarden.cluster.control.status.gather_status`, which fills these types in parallel.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from enum import StrEnum

from tpwarden.cluster.boot.crash import Crash, combine
from tpwarden.cluster.durable import JSONObject, JSONValue
from tpwarden.cluster.signals import container_exit, from_exit_status


class Verdict(StrEnum):
    """Overall state; only HEALTHY exits 0."""

    HEALTHY = "healthy"  # every node reachable and running this config; probe answered
    DRIFT = "drift"  # answering, but containers run another config hash than inventory
    BOOTING = "booting"  # all containers running, API not answering yet
    HUNG = "hung"  # /health 200 but the 1-token probe fails: engine stuck
    DEGRADED = "degraded"  # answering, but a node is unreachable or a GPU reading is alarming
    BROKEN = "broken"  # something is missing, exited or paused and the probe fails
    DOWN = "down"  # no serving container anywhere
    UNREACHABLE = "unreachable"  # no node could be reached and the probe fails: nothing known


@dataclass(frozen=True)
class NodeStatus:
    node: str
    role: str
    reachable: bool
    reason: str | None = None
    container: str | None = None
    state: str | None = None  # running / paused / exited / ... ; None = no container
    uptime_s: float | None = None
    exit_code: int | None = None
    config_hash: str | None = None
    drift: bool = False
    gpus: tuple[Mapping[str, JSONValue], ...] = ()
    gpu_reason: str | None = None
    elapsed_s: float = 0.0
    zones: tuple[Mapping[str, JSONValue], ...] = ()  # ACPI zones: name, type, temp_c, critical_c
    # total_bytes, used_bytes, available_bytes, unified (node_memory); None = not read
    memory: Mapping[str, JSONValue] | None = None
    oom_killed: bool = False  # docker's State.OOMKilled
    crash: Crash | None = None  # an exited container's workers that died, from its log

    def to_json(self) -> JSONObject:
        d = asdict(self)
        d["gpus"] = [dict(g) for g in self.gpus]
        d["zones"] = [dict(z) for z in self.zones]
        d["memory"] = None if self.memory is None else dict(self.memory)
        sig = from_exit_status(self.exit_code)
        d["exit_signal"] = sig.name if sig else None
        d["crash"] = self.crash.to_json() if self.crash else None
        return d


@dataclass(frozen=True)
class ServerStatus:
    url: str
    health_status: int | None = None  # HTTP status of /health; None = no answer
    health_error: str | None = None
    model: str | None = None
    max_model_len: int | None = None
    probe_ok: bool = False
    probe_latency_ms: float | None = None
    probe_error: str | None = None
    requests_running: float | None = None
    requests_waiting: float | None = None
    kv_cache_usage_pct: float | None = None
    drafter_k: int | None = None

    def to_json(self) -> JSONObject:
        return asdict(self)


@dataclass(frozen=True)
class ClusterStatus:
    cluster: str
    config_hash: str
    verdict: Verdict
    nodes: tuple[NodeStatus, ...]
    server: ServerStatus
    elapsed_s: float
    notes: tuple[str, ...] = field(default_factory=tuple)
    # the network NCCL chose per rank (cluster.control.transport): summary, nodes, warnings
    transport: JSONObject | None = None

    @property
    def ok(self) -> bool:
        return self.verdict is Verdict.HEALTHY

    def to_json(self) -> JSONObject:
        return {
            "cluster": self.cluster,
            "config_hash": self.config_hash,
            "verdict": self.verdict.value,
            "ok": self.ok,
            "elapsed_s": self.elapsed_s,
            "notes": list(self.notes),
            "nodes": [n.to_json() for n in self.nodes],
            "server": self.server.to_json(),
            "transport": self.transport,
        }


def gpu_memory_unsupported(gpus: Sequence[Mapping[str, JSONValue]]) -> bool:
    """True when NVML answers Not Supported for every GPU's memory: GB10's unified memory."""
    reasons = [str((g.get("missing") or {}).get("memory_total_mib", "")) for g in gpus]
    return bool(reasons) and all("not supported" in r.lower() for r in reasons)


def node_memory(
    doc: Mapping[str, JSONValue], gpus: Sequence[Mapping[str, JSONValue]]
) -> JSONObject | None:
    """The collector's ``memory`` -> NodeStatus.memory; None when the node could not read it."""
    m = doc.get("memory") or {}
    if m.get("total_bytes") is None:
        return None
    return {
        "total_bytes": m["total_bytes"],
        "used_bytes": m.get("used_bytes"),
        "available_bytes": m.get("available_bytes"),
        "unified": gpu_memory_unsupported(gpus),
    }


def gpu_alarms(node: NodeStatus) -> list[str]:
    """Readings that deserve attention: thermal/power-brake clock events."""
    out = []
    for g in node.gpus:
        reasons = g.get("clock_event_reasons") or []
        bad = [r for r in reasons if "thermal" in r or "power_brake" in r or r == "hw_slowdown"]
        if bad:
            out.append(f"{node.node} GPU{g.get('index')}: {', '.join(bad)}")
    return out


def clock_cap_notes(node: NodeStatus) -> list[str]:
    """A refused lock call and an SM clock above the cap (by the node's record of the lock
    call; NVML has no read-back). Noted, never a change of verdict."""
    out = []
    for g in node.gpus:
        if g.get("clock_cap_state") == "refused":
            out.append(f"{node.node} GPU{g.get('index')}: clock cap {g.get('clock_cap')}")
        if g.get("clock_cap_violation"):
            out.append(f"{node.node}: clock cap violated: {g['clock_cap_violation']}")
    return out


def crash_notes(nodes: Sequence[NodeStatus]) -> list[str]:
    """What ended the containers that exited: an exit status that is a signal's, and the ranks
    their logs say died (all nodes together: the phase is the head's, the signal may be another
    node's)."""
    notes = [
        f"{n.node}: {container_exit(n.exit_code, n.oom_killed, n.state or 'exited')}"
        for n in nodes
        if n.reachable and n.state in ("exited", "dead") and from_exit_status(n.exit_code)
    ]
    head = next((n.node for n in nodes if n.role == "head"), None)
    crash = combine({n.node: n.crash for n in nodes if n.crash is not None}, head)
    if crash is not None:
        notes.append(f"crash: {crash.describe()}")
    return notes


def derive_verdict(
    nodes: Sequence[NodeStatus], server: ServerStatus
) -> tuple[Verdict, tuple[str, ...]]:
    """Pure: observations -> (verdict, notes explaining it)."""
    notes: list[str] = []
    unreachable = [n.node for n in nodes if not n.reachable]
    reachable = [n for n in nodes if n.reachable]
    missing = [n.node for n in reachable if n.state is None]
    not_running = [f"{n.node}={n.state}" for n in reachable if n.state not in (None, "running")]
    drift = [n.node for n in reachable if n.drift]
    for n in unreachable:
        notes.append(f"{n} unreachable")
    if missing:
        notes.append(f"no container on {', '.join(missing)}")
    if not_running:
        notes.append(f"not running: {', '.join(not_running)}")
    if drift:
        notes.append(f"config drift on {', '.join(drift)}")
    notes.extend(crash_notes(reachable))
    for node_status in reachable:
        notes.extend(gpu_alarms(node_status))
        notes.extend(clock_cap_notes(node_status))
    if server.probe_error and server.health_status is not None:
        notes.append(f"probe: {server.probe_error}")
    if nodes and not reachable and not server.probe_ok:
        return Verdict.UNREACHABLE, tuple(notes)
    if reachable and len(missing) == len(reachable) and not server.probe_ok:
        return Verdict.DOWN, tuple(notes)
    if server.probe_ok:
        if unreachable or missing or not_running:
            return Verdict.DEGRADED, tuple(notes)
        if drift:
            return Verdict.DRIFT, tuple(notes)
        if any(gpu_alarms(n) for n in reachable):
            return Verdict.DEGRADED, tuple(notes)
        return Verdict.HEALTHY, tuple(notes)
    if server.health_status == 200:
        return Verdict.HUNG, tuple(notes + ["/health is 200 but a 1-token completion fails"])
    if not unreachable and not missing and not not_running:
        return Verdict.BOOTING, tuple(notes)
    return Verdict.BROKEN, tuple(notes)


def server_gauges(metrics: Mapping[str, float]) -> dict[str, float | None]:
    """The gauges `status` shows, from `tpwarden.cluster.vllm.metrics.sum_by_sample`; KV usage under its pre-0.10 name (`gpu_cache_usage_perc`)
    too."""
    kv = metrics.get("vllm:kv_cache_usage_perc", metrics.get("vllm:gpu_cache_usage_perc"))
    return {
        "requests_running": metrics.get("vllm:num_requests_running"),
        "requests_waiting": metrics.get("vllm:num_requests_waiting"),
        "kv_cache_usage_pct": None if kv is None else round(kv * 100, 2),
    }
