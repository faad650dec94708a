"""The network NCCL chose on each rank, after a boot (issue 52 item 2): read once per serving
container from its own log (`tpwarden.cluster.vllm.nccl_log`), kept on this machine by
container ID (`<state>/nccl/<id>.json`) and recorded in the event log (`nccl_transport`) the
first time it is read, whoever started the container (an `up`, a `restart`, the watchdog). A
later `status` reads the kept answer, not the log again; a container whose NCCL has not said yet
(still loading) is read again next time, one whose boot finished without a word from NCCL is
kept as silent. Where sockets are expected (no RDMA in the inventory: the lab) no log is read:
there is no fall-back to warn about."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

from tpwarden.cluster.containers.info import ContainerInfo
from tpwarden.cluster.control.fabric import expects_rdma
from tpwarden.cluster.control.nodes import Nodes
from tpwarden.cluster.durable import JSONObject, atomic_write_json, read_json
from tpwarden.cluster.errors import TpwardenError
from tpwarden.cluster.spec import ClusterSpec, NodeSpec
from tpwarden.cluster.vllm.nccl_log import NcclTransport, parse_nccl, summarize

Record = Callable[[JSONObject], None]
BOOT_DONE = "Application startup complete"  # vLLM's API server: NCCL's init is long over


def container_transport(
    spec: ClusterSpec,
    nodes: Nodes,
    node: NodeSpec,
    container: ContainerInfo,
    cache_dir: Path,
    record: Record | None = None,
) -> NcclTransport:
    """The kept answer for this container, else its log read now (kept once NCCL has said)."""
    path = cache_dir / f"{container.id}.json"
    kept = read_json(path)
    if isinstance(kept, dict):
        return NcclTransport.from_json(kept)
    text = nodes.docker(node).logs(container.name, tail="all")
    transport = parse_nccl(text.splitlines())
    if transport.kind is None and BOOT_DONE in text:
        transport = dataclasses.replace(transport, silent=True)
    if transport.kind is not None or transport.silent:
        doc = {**transport.to_json(), "node": node.name, "container": container.name}
        atomic_write_json(path, doc, mode=0o644)
        if record is not None:
            rdma, _ = expects_rdma(spec)
            warn = transport.kind == "socket" and rdma
            record({"event": "nccl_transport", "cluster": spec.name, "node": node.name,
                    "container": container.id[:12], "transport": transport.to_json(),
                    "warning": transport.describe() if warn else None})  # fmt: skip
    return transport


def gather_transport(
    spec: ClusterSpec, nodes: Nodes, cache_dir: Path, record: Record | None, timeout_s: float
) -> tuple[dict[str, NcclTransport], str, tuple[str, ...]]:
    """Every node's running serving container, in parallel: (per node, the one-line summary,
    warnings: a rank on sockets while RDMA is expected names its cause)."""

    rdma, why = expects_rdma(spec)
    if not rdma:
        return {}, f"NCCL: sockets expected ({why}); the ranks' logs are not read", ()

    def one(node: NodeSpec) -> NcclTransport | None:
        running = [c for c in nodes.docker(node).list_tpwarden(spec.name) if c.running]
        if not running:
            return None
        return container_transport(spec, nodes, node, running[0], cache_dir, record)

    found = nodes.fan_out(list(spec.nodes), one, timeout=timeout_s)
    per_node = {n: t for n, t in found.items() if isinstance(t, NcclTransport)}
    errors = [f"{n}: {e}" for n, e in found.items() if isinstance(e, TpwardenError)]
    summary = summarize(per_node, rdma)
    return per_node, summary.text, (*summary.warnings, *errors)
