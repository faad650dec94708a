"""Pre-flight: before starting containers, check what their start would trip over on each
node (the image and its architecture, the model and drafter paths, the head's ports, the GPUs
and the clock cap, the memory the engine will ask, the RDMA fabric NCCL is to use).

The clock cap: with `gpu_clock_cap_mhz` set, pre-flight makes the lock call on each node (as
root, like the boot-time `tpwarden-clock-cap` unit; a lock does not survive a reboot or driver
reload) and the node records its answer. NVML has no read-back of a lock, so that answer is the
proof: pre-flight refuses only when the lock call itself failed, with the driver's answer
(NOT_SUPPORTED, NO_PERMISSION, ...). A cap it cannot confirm otherwise (the record not stored,
another value recorded, an SM clock above the cap) is a notice, printed and kept in the report's
`facts["notices"]`, never a refusal.

Memory (`cluster/control/memory_check.py`) and the fabric (`cluster/control/fabric.py`) come
from the same collector run: the node drops its page cache first where asked (root), then
reports its memory and its HCAs. `up`, `restart` and every watchdog restart run this before any
container stops, so a node that lacks the memory or the fabric fails here, with the figures.
An image built for another architecture than the node's is refused with image, digest and both
architectures; the bench and eval client images on the head are checked too (a notice here: a
client image does not stop the server; `bench` and `eval run` refuse it before they run it).
"""

from __future__ import annotations

from tpwarden.cluster.containers.gateway import DockerGateway
from tpwarden.cluster.containers.platform import arch_mismatch
from tpwarden.cluster.control.clocks import cap_notices, gpu_problems
from tpwarden.cluster.control.fabric import FabricCheck, container_problems, judge_fabric
from tpwarden.cluster.control.memory_check import judge_memory
from tpwarden.cluster.control.nodes import Nodes
from tpwarden.cluster.control.plan import ControlPlan
from tpwarden.cluster.control.results import Emit, PreflightReport
from tpwarden.cluster.durable import JSONObject
from tpwarden.cluster.errors import TpwardenError
from tpwarden.cluster.spec import ClusterSpec, NodeSpec

PREFLIGHT_TIMEOUT_S = 120.0


def client_images(spec: ClusterSpec) -> list[str]:
    """The bench and eval client images when they are not the serving image."""
    found = [spec.bench.client_image, spec.eval.client_image]
    return sorted({i for i in found if i and i != spec.serving.image})


def client_image_problem(gw: DockerGateway, node: str, image: str) -> str | None:
    """`bench` and `eval run` before their client container: the image there is built for the
    node's architecture (absent: the run's own error says so)."""
    found = gw.image_platform(image)
    return arch_mismatch(node, image, found, gw.architecture()) if found else None


def image_problems(
    spec: ClusterSpec, nodes: Nodes, node: NodeSpec, notices: list[str]
) -> list[str]:
    """The serving image there and built for the node's architecture; on the head, the client
    images' architecture too (notices)."""
    image = spec.serving.image
    gw = nodes.docker(node)
    found = gw.image_platform(image)
    if found is None:
        return [
            f"{node.name}: image {image} is not present (docker pull/load it on the node first)"
        ]
    machine = gw.architecture()
    problems = [p for p in [arch_mismatch(node.name, image, found, machine)] if p]
    if node.role == "head":
        for client in client_images(spec):
            other = gw.image_platform(client)
            wrong = arch_mismatch(node.name, client, other, machine) if other else None
            if wrong:
                notices.append(f"client image: {wrong}")
    return problems


def _collector_args(spec: ClusterSpec, paths: list[str]) -> tuple[list[str], bool, bool]:
    """One collector run per node (an upload and a python3 start over SSH): the GPU check
    carries the paths, the fabric, and (GPU engines) the page cache and memory."""
    s = spec.serving
    with_paths = [arg for p in paths for arg in ("--path", p)]
    extra = ["--rdma"]
    drop = spec.settings.memory.drop_page_cache
    memory = s.gpus == "all" and spec.settings.memory.check
    if memory:
        extra += ["--memory"] + (["--drop-caches", drop] if drop != "never" else [])
    gpu_check = s.gpus == "all" or bool(s.gpu_clock_cap_mhz)
    if gpu_check:
        action = ["cap", str(s.gpu_clock_cap_mhz)] if s.gpu_clock_cap_mhz else ["show"]
    else:
        action = ["paths", *paths]
    sudo = bool(s.gpu_clock_cap_mhz) or (memory and drop != "never")
    return [*with_paths, *extra, *action], sudo, gpu_check


def _replacing(spec: ClusterSpec, nodes: Nodes, node: NodeSpec, plan: ControlPlan) -> bool:
    """The plan stops a running serving container on this node (its memory comes back)."""
    removed = set(plan.step(node.name).remove)
    if not removed:
        return False
    running = nodes.docker(node).list_tpwarden(spec.name)
    return any(c.running and (c.name in removed or c.id in removed) for c in running)


def preflight(
    spec: ClusterSpec,
    nodes: Nodes,
    plan: ControlPlan,
    emit: Emit,
    timeout_s: float = PREFLIGHT_TIMEOUT_S,
) -> PreflightReport:
    """Image (and its architecture) on every node, model/drafter paths, GPU visible + clock
    cap, memory for the engine, the RDMA fabric, head ports free. Only the nodes the plan
    starts a container on are checked; a node that does not answer within `timeout_s` is a
    problem, not a hang."""
    s = spec.serving
    starting = {st.node for st in plan.steps if st.container is not None}
    checked = [n for n in spec.nodes if n.name in starting]
    head_removed = any(st.node == spec.head.name and st.remove for st in plan.steps)
    paths = [s.model.path] + ([s.drafter.path] if s.drafter and s.drafter.path else [])
    notices: list[str] = []  # appended from the fan-out's threads (list.append is atomic)
    fabric: JSONObject = {}
    memory: JSONObject = {}

    def check(node: NodeSpec) -> list[str]:
        found_notices: list[str] = []
        problems = image_problems(spec, nodes, node, found_notices)
        args, sudo, gpu_check = _collector_args(spec, paths)
        doc = nodes.collector(node, args, sudo=sudo)
        found = doc.get("paths", {})
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
            found_notices += cap_notices(node.name, doc, s.gpu_clock_cap_mhz)
        mem = judge_memory(spec, node.name, doc, _replacing(spec, nodes, node, plan))
        if mem is not None:
            memory[node.name] = mem.text
            emit("preflight", node.name, f"memory: {mem.text.removeprefix(node.name + ': ')}")
            if not mem.ok:
                problems.append(f"{mem.text} (not enough for the engine)")
        fab = judge_fabric(spec, node, doc.get("rdma") or {})
        fabric[node.name] = fab.to_json()
        emit("preflight", node.name, f"fabric: {fab.summary}")
        for note in [*found_notices, *fab.notices]:
            notices.append(note)
            emit("preflight", node.name, f"notice: {note}")
        return [*problems, *fab.problems]

    emit("preflight", None, f"checking {len(checked)} node(s)")
    results = nodes.fan_out(checked, check, timeout=timeout_s)
    problems: list[str] = container_problems(spec) if checked else []
    for name, r in results.items():
        if isinstance(r, TpwardenError):
            problems.append(f"{name}: {r}")
        else:
            problems.extend(r)
    facts: JSONObject = {"notices": tuple(sorted(notices)), "fabric": fabric, "memory": memory}
    return PreflightReport(not problems, tuple(sorted(problems)), facts=facts)


def node_fabric(
    spec: ClusterSpec, nodes: Nodes, timeout_s: float = PREFLIGHT_TIMEOUT_S
) -> dict[str, FabricCheck | TpwardenError]:
    """`inventory check --nodes`: every node's HCAs (the collector's `fabric`) as pre-flight
    judges them; a node that cannot be reached is its error."""

    def one(node: NodeSpec) -> FabricCheck:
        doc = nodes.collector(node, ["fabric"])
        return judge_fabric(spec, node, doc.get("rdma") or {})

    return nodes.fan_out(list(spec.nodes), one, timeout=timeout_s)
