"""GPU clock cap on every node (`tpwarden clocks`), and the pure reading of the collector's
GPU report that pre-flight, `status` and the bench manifest share.

NVML has no read-back of a clock lock (no getter for `nvmlDeviceSetGpuLockedClocks`'s range; a
lock supersedes the application clocks rather than setting them). A cap is proven by the lock
call's own answer, which the collector records on the node (`tpwarden.node.clockcap`) and
reports as `clock_cap: {record, reason, path}`. Reading it:

* the lock call answered SUCCESS on every GPU: "2000 MHz set at T; NVML has no read-back";
* it answered an error (NOT_SUPPORTED, NO_PERMISSION, ...): `refused`, with the driver's answer;
  the only clock-cap fact pre-flight refuses on;
* no record (no lock call since boot, or it could not be stored) or a record of another value:
  a notice, never a refusal;
* an SM clock above cap + `CLOCK_CAP_TOLERANCE_MHZ` (seen under load): a violation, reported.

The reading itself (`read_cap`, `annotate_gpus`) lives with the record, in
`tpwarden.node.clockcap`, so `status` and the bench manifest read it the same way.
"""

from __future__ import annotations

from collections.abc import Mapping

from tpwarden.cluster.control.nodes import Nodes
from tpwarden.cluster.control.results import ClockResult
from tpwarden.cluster.durable import JSONValue
from tpwarden.cluster.spec import ClusterSpec, NodeSpec
from tpwarden.node.clockcap import annotate_gpus, read_cap


def gpu_problems(node: str, doc: Mapping[str, JSONValue]) -> list[str]:
    """Pure: collector JSON -> what stops a start: the action failed (a refused lock call says
    the driver's answer), no GPU visible. A cap that cannot be read back is never a problem
    (NVML has no read-back; see `cap_notices`)."""
    problems = []
    if not doc.get("ok", False):
        problems.append(f"{node}: {doc.get('action')}: {doc.get('error')}")
    nv = doc.get("nvml") or {}
    gpus = doc.get("gpus") or []
    if not nv.get("available", False) or not gpus:
        problems.append(f"{node}: no GPU visible ({nv.get('reason') or nv.get('state')})")
    return problems


def cap_notices(node: str, doc: Mapping[str, JSONValue], cap: int | None) -> list[str]:
    """Pure: what an operator should know about the cap without it stopping anything: no
    record, a record of another value, the record not stored, an SM clock above the cap."""
    if not cap:
        return []
    reading = read_cap(doc)
    notes = []
    if reading.state in ("none", "reset"):
        notes.append(f"{node}: GPU clock cap {cap} MHz not in force by the record: {reading.text}")
    elif reading.state == "set" and reading.mhz != cap:
        notes.append(f"{node}: GPU clock cap is {reading.text}, the inventory wants {cap} MHz")
    cap_doc = doc.get("clock_cap") or {}
    if reading.state == "set" and cap_doc.get("reason"):
        notes.append(f"{node}: {cap_doc['reason']}")
    notes.extend(f"{node}: clock cap violated: {v}" for v in reading.violations.values())
    return notes


def set_clocks(
    spec: ClusterSpec, nodes: Nodes, action: str, mhz: int | None = None
) -> list[ClockResult]:
    """`show`, `cap MHZ` (lock 0..MHZ, proven by the lock call's answer, recorded on the node)
    or `reset`, every node. `show` fails a node on a refused lock call or a violated cap."""
    args = {"show": ["show"], "cap": ["cap", str(mhz)], "reset": ["reset"]}[action]

    def run(node: NodeSpec) -> ClockResult:
        doc = nodes.collector(node, args, sudo=action != "show")
        reading = read_cap(doc)
        gpus = annotate_gpus(doc)
        problems = gpu_problems(node.name, doc)
        if action == "show" and reading.state == "refused":
            problems.append(f"{node.name}: {reading.text}")
        problems += [f"{node.name}: clock cap violated: {v}" for v in reading.violations.values()]
        message = "; ".join(problems) or reading.text
        return ClockResult(node.name, not problems, message, gpus)

    results = nodes.fan_out(list(spec.nodes), run, timeout=120)
    return [
        r if isinstance(r, ClockResult) else ClockResult(name, False, str(r))
        for name, r in results.items()
    ]
