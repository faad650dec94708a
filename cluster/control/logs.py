"""The serving containers' logs on every node: a tail (`tpwarden logs`), a follow that
interleaves nodes as lines come, and the last lines a failed boot reports."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator

from tpwarden.cluster.containers.gateway import LogStream
from tpwarden.cluster.control.nodes import Nodes
from tpwarden.cluster.errors import TpwardenError
from tpwarden.cluster.spec import ClusterSpec, NodeSpec


def _node_tail(spec: ClusterSpec, nodes: Nodes, node: NodeSpec, tail: int) -> str:
    gw = nodes.docker(node)
    return "\n".join(gw.logs(c.id, tail=tail) for c in gw.list_tpwarden(spec.name))


def tail_logs(
    spec: ClusterSpec, nodes: Nodes, node: str | None = None, tail: int = 100
) -> dict[str, str]:
    """node -> its containers' last `tail` lines; a node that fails reads `<error>`."""
    selected = [spec.node(node)] if node else list(spec.nodes)
    return {
        k: (f"<{v}>" if isinstance(v, TpwardenError) else v)
        for k, v in nodes.fan_out(
            selected, lambda n: _node_tail(spec, nodes, n, tail), timeout=60
        ).items()
    }


def last_log_lines(spec: ClusterSpec, nodes: Nodes, tail: int = 20) -> dict[str, str]:
    """node -> its containers' last lines, or the error as text; for a failed boot's report."""
    return {
        k: (str(v) if isinstance(v, TpwardenError) else v)
        for k, v in nodes.fan_out(
            list(spec.nodes), lambda n: _node_tail(spec, nodes, n, tail), timeout=30
        ).items()
    }


def follow_logs(
    spec: ClusterSpec, nodes: Nodes, node: str | None = None, tail: int = 10
) -> Iterator[tuple[str, str]]:
    """(node, line) from every selected node's container, interleaved as they come."""
    selected = [spec.node(node)] if node else list(spec.nodes)
    q: queue.Queue[tuple[str, str | None]] = queue.Queue()
    streams: list[LogStream] = []
    for n in selected:
        gw = nodes.docker(n)
        for c in gw.list_tpwarden(spec.name):
            st = gw.follow_logs(c.id, tail=tail)
            streams.append(st)
            threading.Thread(target=_pump_tagged, args=(n.name, st, q), daemon=True).start()
    open_streams = len(streams)
    try:
        while open_streams:
            name, line = q.get()
            if line is None:
                open_streams -= 1
                continue
            yield name, line
    finally:
        for st in streams:
            st.close()


def _pump_tagged(node: str, stream: LogStream, q: queue.Queue[tuple[str, str | None]]) -> None:
    try:
        for line in stream:
            q.put((node, line))
    except TpwardenError as e:
        q.put((node, f"<{e}>"))
    finally:
        q.put((node, None))
