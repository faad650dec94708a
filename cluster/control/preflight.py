"""Pre-flight: before starting containers, check what their start would trip over on each
node (the image, the model and drafter paths, the head's ports, the GPUs and the clock cap).

The clock cap: with `gpu_clock_cap_mhz` set, pre-flight makes the lock call on each node (as
root, like the boot-time `tpwarden-clock-cap` unit; a lock does not survive a reboot or driver
reload) and the node records its answer. NVML has no read-back of a lock, so that answer is the
proof: pre-flight refuses only when the lock call itself failed, with the driver's answer
(NOT_SUPPORTED, NO_PERMISSION, ...). A cap it cannot confirm otherwise (the record not stored,
another value recorded, an SM clock above the cap) is a notice, printed and kept in the report's
`facts["notices"]`, never a refusal."""

from __future__ import annotations

from tpwarden.cluster.control.clocks import cap_notices, gpu_problems
from tpwarden.cluster.control.nodes import Nodes
from tpwarden.cluster.control.plan import ControlPlan
from tpwarden.cluster.control.results import Emit, PreflightReport
from tpwarden.cluster.durable import JSONObject
from tpwarden.cluster.errors import TpwardenError
from tpwarden.cluster.spec import ClusterSpec, NodeSpec

PREFLIGHT_TIMEOUT_S = 120.0


def preflight(
    spec: ClusterSpec,
    nodes: Nodes,
    plan: ControlPlan,
    emit: Emit,
    timeout_s: float = PREFLIGHT_TIMEOUT_S,
) -> PreflightReport:
    """Image on every node, model/drafter paths, GPU visible + clock cap, head ports free.
    Only the nodes the plan starts a container on are checked; a node that does not answer
    within `timeout_s` is a problem, not a hang."""
    s = spec.serving
    starting = {st.node for st in plan.steps if st.container is not None}
    checked = [n for n in spec.nodes if n.name in starting]
    head_removed = any(st.node == spec.head.name and st.remove for st in plan.steps)
    paths = [s.model.path] + ([s.drafter.path] if s.drafter and s.drafter.path else [])
    notices: list[str] = []  # appended from the fan-out's threads (list.append is atomic)

    def check(node: NodeSpec) -> list[str]:
        problems = []
        if not nodes.docker(node).image_present(s.image):
            problems.append(
                f"{node.name}: image {s.image} is not present (docker pull/load "
                f"it on the node first)"
            )
        # One collector run per node where it can be (each is an upload and a python3 start
        # over SSH): the GPU check carries the paths.
        gpu_check = s.gpus == "all" or bool(s.gpu_clock_cap_mhz)
        doc: JSONObject = {}
        if gpu_check:
            args = ["cap", str(s.gpu_clock_cap_mhz)] if s.gpu_clock_cap_mhz else ["show"]
            with_paths = [arg for p in paths for arg in ("--path", p)]
            doc = nodes.collector(node, [*with_paths, *args], sudo=bool(s.gpu_clock_cap_mhz))
        found = (doc or nodes.collector(node, ["paths", *paths])).get("paths", {})
        for p in paths:
            if not found.get(p, {}).get("exists"):
                problems.append(f"{node.name}: {p} does not exist")
        if node.role == "head" and not head_removed:
            # Each port where it will be bound: the API on tpwarden.host, the rendezvous on
            # the head's vllm_host_ip.
            for host, port in ((s.host, s.port), (node.vllm_host_ip, s.parallel.master_port)):
                busy = nodes.collector(node, ["ports", "--host", host, str(port)]).get("ports", {})
                info = busy.get(str(port), {})
                if not info.get("free", False):
                    problems.append(f"{node.name}: port {host}:{port} is {info.get('reason')}")
        if gpu_check:
            problems.extend(gpu_problems(node.name, doc))
            for note in cap_notices(node.name, doc, s.gpu_clock_cap_mhz):
                notices.append(note)
                emit("preflight", node.name, f"notice: {note}")
        return problems

    emit("preflight", None, f"checking {len(checked)} node(s)")
    results = nodes.fan_out(checked, check, timeout=timeout_s)
    problems: list[str] = []
    for name, r in results.items():
        if isinstance(r, TpwardenError):
            problems.append(f"{name}: {r}")
        else:
            problems.extend(r)
    return PreflightReport(
        not problems, tuple(sorted(problems)), facts={"notices": tuple(sorted(notices))}
    )
