"""GPU clock cap on every node (`tpwarden clocks`), and the pure reading of the collector's
GPU report that pre-flight shares."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tpwarden.cluster.control.results import ClockResult
from tpwarden.cluster.nodes import Nodes
from tpwarden.cluster.spec import ClusterSpec, NodeSpec


def set_clocks(
    spec: ClusterSpec, nodes: Nodes, action: str, mhz: int | None = None
) -> list[ClockResult]:
    """`show`, `cap MHZ` (lock 0..MHZ, verified by reading back) or `reset`, every node."""
    args = {"show": ["show"], "cap": ["cap", str(mhz)], "reset": ["reset"]}[action]

    def run(node: NodeSpec) -> ClockResult:
        doc = nodes.collector(node, args, sudo=action != "show")
        gpus = tuple(doc.get("gpus") or ())
        problems = gpu_problems(node.name, doc, mhz if action == "cap" else None)
        if action == "reset":
            problems += [
                f"{node.name}: GPU{g.get('index')} still capped at {g['locked_clock_max_mhz']} MHz"
                for g in gpus
                if g.get("locked_clock_max_mhz")
            ]
        return ClockResult(node.name, not problems, "; ".join(problems) or "ok", gpus)

    results = nodes.fan_out(list(spec.nodes), run, timeout=120)
    return [
        r if isinstance(r, ClockResult) else ClockResult(name, False, str(r))
        for name, r in results.items()
    ]


def gpu_problems(node: str, doc: Mapping[str, Any], cap: int | None) -> list[str]:
    """Pure: collector JSON -> problems (no GPU, action failed, cap not read back)."""
    problems = []
    if not doc.get("ok", False):
        problems.append(f"{node}: {doc.get('action')}: {doc.get('error')}")
    nv = doc.get("nvml") or {}
    gpus = doc.get("gpus") or []
    if not nv.get("available", False) or not gpus:
        problems.append(f"{node}: no GPU visible ({nv.get('reason') or nv.get('state')})")
    if cap:
        for g in gpus:
            got = g.get("locked_clock_max_mhz")
            if got != cap:
                problems.append(f"{node}: GPU{g.get('index')} clock cap reads {got}, want {cap}")
    return problems
