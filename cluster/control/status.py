"""`tpwarden status` gathered: every node's container and GPUs and the server's answers, in
parallel, each bounded by the command's timeout. A node that fails is a row that says why,
never an exception; the verdict is derived by the pure `tpwarden.cluster.control.status_model`."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from datetime import datetime

from tpwarden.cluster.boot.crash import Crash
from tpwarden.cluster.boot.crash_report import CRASH_TAIL_LINES, read_crash
from tpwarden.cluster.containers.info import ContainerInfo
from tpwarden.cluster.control.nodes import Nodes, daemon_call
from tpwarden.cluster.control.status_model import (
    ClusterStatus,
    NodeStatus,
    ServerStatus,
    derive_verdict,
    node_memory,
)
from tpwarden.cluster.durable import JSONObject, JSONValue
from tpwarden.cluster.errors import DockerError, NodeUnreachable, TpwardenError
from tpwarden.cluster.spec import ClusterSpec, NodeSpec
from tpwarden.node.clockcap import annotate_gpus

# The server part's own cap: /health must make it into a status even when the probe hangs.
SERVER_TIMEOUT_S = 10.0


def node_status(
    spec: ClusterSpec,
    nodes: Nodes,
    node: NodeSpec,
    now: datetime,
    timeout_s: float,
    with_gpus: bool = True,
) -> NodeStatus:
    """One node's row: its serving container (by labels) and, with `with_gpus`, the
    collector's GPU, thermal-zone and memory report. A GPU report that fails is a reason."""
    t = time.monotonic()
    containers = nodes.docker(node).list_tpwarden(spec.name)
    c = containers[0] if containers else None
    gpus: tuple[Mapping[str, JSONValue], ...] = ()
    gpu_reason = None
    zones: tuple[Mapping[str, JSONValue], ...] = ()
    memory = None
    if with_gpus:
        try:
            doc = nodes.collector(node, ["show"], timeout=timeout_s)
            gpus = annotate_gpus(doc)  # + the clock cap by the node's record of the lock call
            zones = tuple(doc.get("zones") or ())
            memory = node_memory(doc, gpus)
            nv = doc.get("nvml") or {}
            if not nv.get("available", False):
                gpu_reason = nv.get("reason") or nv.get("state")
        except TpwardenError as e:
            gpu_reason = str(e)
    want = spec.config_hash()
    return NodeStatus(
        node=node.name,
        role=node.role,
        reachable=True,
        container=c.name if c else None,
        state=c.state if c else None,
        uptime_s=c.uptime_s(now) if c else None,
        exit_code=c.exit_code if c else None,
        config_hash=c.config_hash if c else None,
        drift=bool(c and c.config_hash != want),
        gpus=gpus,
        gpu_reason=gpu_reason,
        elapsed_s=round(time.monotonic() - t, 3),
        zones=zones,
        memory=memory,
        oom_killed=bool(c and c.oom_killed),
        crash=exited_crash(nodes, node, c),
    )


def exited_crash(nodes: Nodes, node: NodeSpec, c: ContainerInfo | None) -> Crash | None:
    """The workers an exited container's log says died (`status`, the incident dossier); a
    log that cannot be read says nothing (the exit status still does)."""
    if c is None or c.state not in ("exited", "dead"):
        return None
    try:
        return read_crash(nodes.docker(node).logs(c.id, tail=CRASH_TAIL_LINES))
    except TpwardenError:
        return None


def gather_status(
    spec: ClusterSpec,
    nodes: Nodes,
    server_status: Callable[[float], ServerStatus],
    now: datetime,
    timeout_s: float,
    with_gpus: bool = True,
    transport: Callable[[float], JSONObject] | None = None,
) -> ClusterStatus:
    """Nodes and server in parallel, each bounded by `timeout_s`; never raises for a node.
    `server_status(deadline)` answers by a monotonic deadline; `now` ages the containers.
    `transport(timeout_s)` says which network NCCL chose on each rank (its warnings become
    notes; they never change the verdict)."""
    t0 = time.monotonic()
    want = spec.config_hash()
    # The server part shares the command's deadline: a hung engine makes the 1-token probe
    # wait, and /health's answer must still make it into the status.
    server_deadline = t0 + min(timeout_s, SERVER_TIMEOUT_S)
    server_future = daemon_call(
        lambda _n: server_status(server_deadline), spec.head, "tpwarden-server"
    )
    results = nodes.fan_out(
        list(spec.nodes),
        lambda n: node_status(spec, nodes, n, now, timeout_s, with_gpus),
        timeout=timeout_s,
    )
    rows = []
    for n in spec.nodes:
        r = results[n.name]
        if isinstance(r, NodeStatus):
            rows.append(r)
        else:
            reason = r.reason if isinstance(r, NodeUnreachable) else str(r)
            reachable = isinstance(r, DockerError)
            rows.append(NodeStatus(n.name, n.role, reachable, reason))
    try:
        server = server_future.result(timeout=max(0.1, timeout_s + 1.0 - (time.monotonic() - t0)))
    except Exception as e:  # noqa: BLE001 - a status never raises for the server part
        server = ServerStatus(spec.api_base, health_error=str(e) or "timed out")
    verdict, notes = derive_verdict(rows, server)
    nccl = None
    if transport is not None:
        try:
            nccl = transport(timeout_s)
            notes += tuple(str(w) for w in nccl.get("warnings") or [])
        except TpwardenError as e:  # a status never raises for a side reading
            nccl = {"summary": f"NCCL transport not read: {e}", "nodes": {}, "warnings": []}
    return ClusterStatus(
        spec.name,
        want,
        verdict,
        tuple(rows),
        server,
        round(time.monotonic() - t0, 3),
        notes,
        nccl,
    )
