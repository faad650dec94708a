"""An incident dossier of the running server, taken from every node in parallel (issue 32).

For each node, within one deadline for all of them (``DOSSIER_TIMEOUT_S``): its serving
container as the engine reports it (state, exit code, OOM flag, host PID of its init), then the
node's collector (`collector.pyz dossier`, tpwarden.node.dossier) run on the container's
process tree: process facts and CPU progress over a short window, py-spy stacks, kernel log
events and NVML facts. A container that exited has its log read instead, for the workers that
died in it and by which signal (`tpwarden.cluster.boot.crash`). Where the node's /proc does not
show the container's processes, they are read from a diagnostic container in the rank's PID
namespace (`from_beside`). A node that does not answer in time is a finding (its ``error``),
never a wait past the deadline.
`verdict` (tpwarden.cluster.reports.incident_verdict) names the suspect.

The dossier is plain JSON (what is stored, shown and alerted is the same document).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from tpwarden.cluster.containers.info import ContainerInfo
from tpwarden.cluster.control.nodes import DIAG_PYSPY, Nodes
from tpwarden.cluster.control.status import exited_crash
from tpwarden.cluster.durable import JSONObject
from tpwarden.cluster.errors import TpwardenError
from tpwarden.cluster.reports.incident_verdict import verdict
from tpwarden.cluster.secrets import redact_argv
from tpwarden.cluster.spec import ClusterSpec, NodeSpec

DOSSIER_TIMEOUT_S = 10.0  # the whole dossier, all nodes in parallel
WINDOW_S = 1.5  # CPU-progress window on each node
KERNEL_SINCE_S = 900.0  # kernel log read back this far (covers 3 failures at 120 s and more)
# Where provisioning puts py-spy (the nodes' tpwarden venv, playbooks' tpwarden_venv), then
# TPWARDEN_PYSPY; the collector also tries py-spy on the node's PATH.
DEFAULT_PYSPY = ("/opt/tpwarden/venv/bin/py-spy",)
DOSSIER_VERSION = 1
MIN_BESIDE_S = 3.0  # a diagnostic container needs its window plus a start and a dump


def pyspy_candidates(environ: dict[str, str] | None = None) -> list[str]:
    env = os.environ if environ is None else environ
    extra = [env["TPWARDEN_PYSPY"]] if env.get("TPWARDEN_PYSPY") else []
    return [*extra, *DEFAULT_PYSPY]


def container_json(c: ContainerInfo | None) -> dict[str, Any] | None:
    if c is None:
        return None
    return {
        "id": c.id[:12],
        "name": c.name,
        "state": c.state,
        "exit_code": c.exit_code,
        "oom_killed": c.oom_killed,
        "pid": c.pid,
        "started_at": c.started_at.isoformat() if c.started_at else None,
        "finished_at_unix_s": c.finished_at.timestamp() if c.finished_at else None,
    }


def _newest(found: Sequence[ContainerInfo]) -> ContainerInfo | None:
    epoch = datetime.min.replace(tzinfo=UTC)
    return max(found, key=lambda c: c.started_at or epoch) if found else None


def _redacted(collected: Any) -> Any:
    """The collector's part with secrets hidden in the command lines py-spy printed (a serving
    process's argv is stored, shown and alerted with the dossier)."""
    for proc in (collected or {}).get("processes") or []:
        stack = proc.get("pyspy") or {}
        if stack.get("command"):
            stack["command"] = " ".join(redact_argv(stack["command"].split(" ")))
    return collected


def node_part(
    spec: ClusterSpec, nodes: Nodes, node: NodeSpec, pyspy: Sequence[str], budget_s: float
) -> dict[str, Any]:
    """One node's part: its container, then what its collector saw of its processes."""
    started = time.monotonic()
    container = _newest(nodes.docker(node).list_tpwarden(spec.name))
    doc: dict[str, Any] = {
        "rank": node.rank,
        "role": node.role,
        "error": None,
        "container": container_json(container),
        "collected": None,
        "collect_error": None,
        "gpus": [],
    }
    if container is None or container.pid is None:
        # nothing runs: the container's state says it all, and its log which rank died how
        crash = exited_crash(nodes, node, container)
        doc["crash"] = crash.to_json() if crash else None
        return doc
    args = ["dossier", "--pid", str(container.pid), "--window", str(WINDOW_S)]
    args += ["--since", str(KERNEL_SINCE_S)]
    for path in pyspy:
        args += ["--pyspy", path]
    left = max(1.0, budget_s - (time.monotonic() - started))
    try:
        out = nodes.collector(node, args, sudo=True, timeout=left)
    except TpwardenError as e:
        doc["collect_error"] = str(e)
        return doc
    collected = out.get("dossier")
    if isinstance(collected, dict) and container.pid in (collected.get("missing_roots") or []):
        left = budget_s - (time.monotonic() - started)
        collected = from_beside(nodes, node, container, collected, left)
    doc["collected"] = _redacted(collected)
    doc["collect_error"] = out.get("error")
    doc["gpus"] = out.get("gpus") or []
    doc["nvml"] = out.get("nvml")
    return doc


def from_beside(
    nodes: Nodes, node: NodeSpec, container: ContainerInfo, host_part: JSONObject, left_s: float
) -> JSONObject:
    """The node's /proc does not show the container's processes (the collector runs in another
    PID namespace than the engine's: a node in a VM or machine container, or a remote engine):
    read them from a diagnostic container in the rank's PID namespace instead
    (`Nodes.collector_beside`). The host's part keeps its kernel log; the processes and their
    stacks come from the diagnostic container, their PIDs the container's own."""
    findings = list(host_part.get("findings") or [])
    if container.state not in ("running", "paused") or left_s < MIN_BESIDE_S:
        findings.append(f"diagnostic container: not run ({container.state}, {left_s:.1f} s left)")
        return {**host_part, "findings": findings}
    args = ["dossier", "--pid", "1", "--window", str(WINDOW_S), "--no-kernel-log"]
    args += ["--pyspy", f"/{DIAG_PYSPY}"] + (["--frozen"] if container.state == "paused" else [])
    try:
        beside = nodes.collector_beside(node, container, args, timeout=left_s - 1.0)
    except TpwardenError as e:
        findings.append(f"diagnostic container: {e}")
        return {**host_part, "findings": findings}
    found = beside.get("dossier")
    part: JSONObject = found if isinstance(found, dict) else {}
    findings.append("processes read from a diagnostic container in the rank's PID namespace")
    findings += [f"diagnostic container: {f}" for f in part.get("findings") or []]
    if beside.get("error"):
        findings.append(f"diagnostic container: {beside['error']}")
    return {
        **host_part,
        "processes": part.get("processes") or [],
        "window_s": part.get("window_s"),
        "took_s": part.get("took_s"),
        "pid_namespace": "container",
        "findings": findings,
    }


def capture(
    spec: ClusterSpec,
    nodes: Nodes,
    reason: str,
    *,
    timeout_s: float = DOSSIER_TIMEOUT_S,
    pyspy: Sequence[str] | None = None,
    wall: Callable[[], float] = time.time,
) -> dict[str, Any]:
    """The dossier of the server right now, with its verdict. Never raises for a node."""
    t0, started = wall(), time.monotonic()
    paths = list(pyspy) if pyspy is not None else pyspy_candidates()
    budget = max(1.0, timeout_s - 1.0)  # the fan-out's deadline is the hard one
    results = nodes.fan_out(
        list(spec.nodes), lambda n: node_part(spec, nodes, n, paths, budget), timeout=timeout_s
    )
    parts: dict[str, Any] = {}
    for node in spec.nodes:
        r = results.get(node.name)
        if isinstance(r, dict):
            parts[node.name] = r
        else:
            why = str(r) if r is not None else "no result"
            parts[node.name] = {"rank": node.rank, "role": node.role, "error": why}
    doc: dict[str, Any] = {
        "dossier": DOSSIER_VERSION,
        "cluster": spec.name,
        "reason": reason,
        "taken_at_unix_s": t0,
        "took_s": round(time.monotonic() - started, 3),
        "nodes": parts,
    }
    doc["verdict"] = verdict(doc).to_json()
    return doc
