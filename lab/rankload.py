"""Each rank's load, for the lab's thermal stand-in (issue 52): the sensors heat with what each
node's rank is doing and cool after.

What a GPU of a tensor-parallel server does follows from two facts the lab can read:

- the server's work, from the head's ``/metrics`` (requests running: every rank computes its
  share of each step, so all ranks carry the same load);
- each node's serving container, from the host's Docker engine: running, paused (frozen: its
  GPU idles), gone (removed by a restart, or exited).

A running rank carries the server's load. While the server is hung on a lost rank, the live ranks
spin in the collective that waits for it (on real GPUs NCCL's kernels busy-wait, at full clocks)
whatever ``/metrics`` says (the simulator keeps the hung request running; real vLLM reports 0
running), and the frozen one cools: the plot shows the hang. A rank whose server does not
answer ``/metrics`` (loading weights, or the API not up yet) carries a little load; without a
container, none: the plot shows the restart.

Pure: :func:`rank_loads`. Readers: :class:`ServerLoad` (``/metrics``, keeping its last answer
for a while when a busy server answers late) and :class:`ServerContainers` (Docker). Together:
:class:`RankLoadSource`, the ``LoadSource`` the sensor daemon's driver ticks with.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import httpx
from tpwarden.cluster.labels import LABEL_COMPONENT
from tpwarden.lab.paths import CLUSTER_LABEL, CLUSTER_NAME, NODE_LABEL, SERVER_COMPONENT

BOOT_LOAD = 0.2  # a rank whose server does not answer yet: loading weights, compiling
SPIN_LOAD = 0.7  # a live rank waiting in a collective for a frozen one: kernels spinning
LATE_HOLD_S = 30.0  # a /metrics answer stands in for this long when the next ones time out


def running_requests(metrics_text: str) -> float:
    """Sum of ``vllm:num_requests_running`` samples in Prometheus text format."""
    total = 0.0
    for line in metrics_text.splitlines():
        if line.startswith("vllm:num_requests_running"):
            name = line.split("{", 1)[0].split(" ", 1)[0]
            if name != "vllm:num_requests_running":
                continue
            try:
                total += float(line.rsplit(None, 1)[-1])
            except ValueError:
                continue
    return total


def load_from_running(running: float, saturation: float = 8.0) -> float:
    """0 when nothing runs; one stream already keeps the GPU busy; ``saturation`` = full load."""
    if running <= 0:
        return 0.0
    return min(1.0, 0.5 + 0.5 * running / saturation)


def rank_loads(
    server: float | None, containers: Mapping[str, str], nodes: Sequence[str]
) -> dict[str, float]:
    """Per node: the server's load (0..1; None when ``/metrics`` does not answer) where the
    node's serving container is running, at least ``SPIN_LOAD`` while another rank is frozen
    (paused), else nothing. Pure."""
    hung = any(containers.get(node) == "paused" for node in nodes)
    out = {}
    for node in nodes:
        if containers.get(node) != "running":
            out[node] = 0.0  # paused (frozen), exited, removed or never started
        else:
            load = BOOT_LOAD if server is None else server
            out[node] = max(load, SPIN_LOAD) if hung else load
    return out


class ServerLoad:
    """The server's load from the head's ``/metrics``: None when nothing answers there (no
    server, or not up yet). A server busy enough to answer late keeps its last load for
    ``LATE_HOLD_S``: a timeout under load is not an idle GPU."""

    def __init__(
        self,
        url: str,
        *,
        timeout_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.url = url
        self.clock = clock
        self._client = httpx.Client(timeout=timeout_s, transport=transport, trust_env=False)
        self._last: tuple[float, float] | None = None  # (when, load) of the last answer

    def __call__(self) -> float | None:
        now = self.clock()
        try:
            response = self._client.get(self.url)
            response.raise_for_status()
        except httpx.TimeoutException:
            if self._last is not None and now - self._last[0] <= LATE_HOLD_S:
                return self._last[1]
            return None
        except httpx.HTTPError:
            self._last = None
            return None
        load = load_from_running(running_requests(response.text))
        self._last = (now, load)
        return load

    def close(self) -> None:
        self._client.close()


class ServerContainers:
    """Each lab node's serving container state (``running``, ``paused``, ``exited``...) from the
    host's Docker engine, by the labels cluster control puts on them; {} when Docker does not
    answer (every rank then reads as idle)."""

    def __init__(self, client: Any = None, cluster: str = CLUSTER_NAME) -> None:
        self._client, self.cluster = client, cluster

    def __call__(self) -> dict[str, str]:
        filters = {"label": [f"{CLUSTER_LABEL}={self.cluster}",
                             f"{LABEL_COMPONENT}={SERVER_COMPONENT}"]}  # fmt: skip
        try:  # one list call a tick (the SDK's containers.list inspects each container too)
            client = self._client or self._connect()
            found = client.api.containers(all=True, filters=filters)
        except Exception:  # noqa: BLE001 - the sensors go on without Docker: every rank idle
            self._client = None
            return {}
        states: dict[str, str] = {}
        for c in found:
            node = (c.get("Labels") or {}).get(NODE_LABEL)
            if node and states.get(node) != "running":  # a running one wins over leftovers
                states[node] = str(c.get("State"))
        return states

    def _connect(self) -> Any:
        import docker  # deferred: the sensor daemon's only Docker use, kept beside it

        self._client = docker.from_env()
        return self._client


class RankLoadSource:
    """The sensor driver's ``LoadSource``: :func:`rank_loads` of what the server and the
    containers say now."""

    def __init__(
        self,
        server: Callable[[], float | None],
        containers: Callable[[], Mapping[str, str]],
        nodes: Sequence[str],
    ) -> None:
        self.server, self.containers, self.nodes = server, containers, tuple(nodes)

    def __call__(self) -> dict[str, float]:
        return rank_loads(self.server(), self.containers(), self.nodes)
