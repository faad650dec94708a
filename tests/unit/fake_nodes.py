"""A fake `tpwarden.cluster.control.nodes.Nodes`: containers in dicts, scripted collector answers.

Cluster control's parts take a `Nodes`; these tests hand them `FakeNodes` instead of SSH and
Docker (as pyinfra tests its operations on a fake host). Fan-out is the real one, so deadlines
and errors-as-values behave as they do against real nodes. Every action lands in `actions`,
in the order it happened.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from tpwarden.cluster.containers.info import ContainerInfo
from tpwarden.cluster.containers.platform import ImagePlatform
from tpwarden.cluster.control.nodes import fan_out
from tpwarden.cluster.errors import DockerError, NodeUnreachable, TpwardenError
from tpwarden.cluster.inventory.load import load_inventory
from tpwarden.cluster.launch import ContainerPlan, plan_cluster
from tpwarden.cluster.spec import ClusterSpec, NodeSpec
from tpwarden.node.clockcap import LockAnswer, make_record

T = TypeVar("T")
GOOD = Path(__file__).parent / "inventories" / "good.yml"
EPOCH = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def good_spec() -> ClusterSpec:
    """Four nodes, native TP, a drafter, a clock cap of 2000 MHz, the API key from the env."""
    return load_inventory(GOOD)


class FixedClock:
    """Wall-clock seconds that move only when a test says so."""

    def __init__(self, start: datetime = EPOCH) -> None:
        self.t = start.timestamp()

    def __call__(self) -> float:
        return self.t

    def advance(self, s: float) -> None:
        self.t += s


class FakeLogStream:
    def __init__(self, lines: Sequence[str], hold_open: bool = False) -> None:
        self.lines = list(lines)
        self.closed = threading.Event()
        self.hold_open = hold_open  # a live container: the stream ends only when closed

    def __iter__(self) -> Iterator[str]:
        yield from self.lines
        if self.hold_open:
            self.closed.wait(30)

    def close(self) -> None:
        self.closed.set()


@dataclass
class FakeSession:
    node: str
    files: dict[str, bytes] = field(default_factory=dict)

    dirs: set[str] = field(default_factory=set)
    modes: dict[str, int] = field(default_factory=dict)
    commands: list[list[str]] = field(default_factory=list)

    def read_bytes(self, path: str) -> bytes:
        if path not in self.files:
            raise TpwardenError(f"{self.node}: {path}: no such file")
        return self.files[path]

    def run(self, argv: list[str], **_: Any) -> Any:
        """`test -d DIR` (the applied-plan copy) and `mkdir -p -m MODE DIR` (secret files)."""
        self.commands.append(list(argv))
        if argv[:2] == ["mkdir", "-p"]:
            self.dirs.add(argv[-1])
            return type("Result", (), {"rc": 0, "stdout": "", "stderr": ""})()
        rc = 0 if argv[:2] == ["test", "-d"] and argv[2] in self.dirs else 1
        return type("Result", (), {"rc": rc, "stdout": "", "stderr": ""})()

    def put_atomic(self, data: bytes, remote: str, mode: int = 0o600, **_: Any) -> None:
        self.files[remote] = data
        self.modes[remote] = mode


class FakeDocker:
    """One node's engine: containers by name, images present, each container's log."""

    def __init__(self, node: str, owner: FakeNodes) -> None:
        self.node = node
        self.owner = owner
        self.containers: dict[str, ContainerInfo] = {}
        self.images: set[str] = set()
        self.log_lines: dict[str, list[str]] = {}  # container name -> its log
        self.secrets_seen: dict[str, Mapping[str, str]] = {}
        self.execs: list[tuple[str, list[str], dict[str, str]]] = []  # container, argv, env
        self.streams: list[FakeLogStream] = []  # every log stream handed out
        self.machine = "aarch64"  # docker info's Architecture (uname -m): a GB10 node
        self.platforms: dict[str, ImagePlatform] = {}  # image -> platform (default: arm64)

    def add(self, plan: ContainerPlan, state: str = "running", exit_code: int | None = None):
        info = ContainerInfo(
            node=self.node,
            id=f"{plan.name}-id-0123456789",
            name=plan.name,
            image=plan.image,
            state=state,
            labels=dict(plan.labels),
            started_at=EPOCH,
            exit_code=exit_code,
        )
        self.containers[plan.name] = info
        return info

    def list_tpwarden(self, cluster: str | None = None) -> list[ContainerInfo]:
        self.owner.gate(self.node)
        return list(self.containers.values())

    def image_present(self, image: str) -> bool:
        self.owner.gate(self.node)
        return image in self.images

    def image_platform(self, image: str) -> ImagePlatform | None:
        self.owner.gate(self.node)
        if image not in self.images:
            return None
        default = ImagePlatform(
            id="sha256:" + "a" * 64, architecture="arm64", variant="v8",
            repo_digests=(f"{image.rsplit(':', 1)[0]}@sha256:{'b' * 64}",),
        )  # fmt: skip
        return self.platforms.get(image, default)

    def architecture(self) -> str:
        self.owner.gate(self.node)
        return self.machine

    def run(self, plan: ContainerPlan, secret_values: Mapping[str, str] | None = None):
        self.owner.gate(self.node)
        self.owner.record("start", self.node, plan.name)
        self.secrets_seen[plan.name] = dict(secret_values or {})
        return self.add(plan)

    def remove(self, container: str, stop_timeout: int = 10) -> bool:
        self.owner.gate(self.node)
        self.owner.record("remove", self.node, container)
        return self.containers.pop(container, None) is not None

    def exec_detached(
        self, container: str, argv: Sequence[str], env: Mapping[str, str] | None = None
    ) -> None:
        self.owner.gate(self.node)
        self.execs.append((container, list(argv), dict(env or {})))
        self.owner.record("exec", self.node, container)

    def _name(self, container: str) -> str:
        return next((c.name for c in self.containers.values() if container in (c.id, c.name)), "")

    def logs(self, container: str, tail: int | str = 100) -> str:
        self.owner.gate(self.node)
        lines = self.log_lines.get(self._name(container), [])
        return "\n".join(lines if tail == "all" else lines[-int(tail) :])

    def follow_logs(self, container: str, tail: int | str = 100) -> FakeLogStream:
        self.owner.gate(self.node)
        lines = self.log_lines.get(self._name(container) or container, [])
        stream = FakeLogStream(lines, hold_open=True)
        self.streams.append(stream)
        return stream


GIB = 1024**3
# a GB10 node after the page cache was dropped: 119.7 GiB seen, 110 GiB available
GB10_MEMORY = {"total_bytes": int(119.7 * GIB), "available_bytes": 110 * GIB, "source": "psutil"}
GB10_PAGE_CACHE = {"dropped": True, "unified": True, "available_before_bytes": 80 * GIB,
                   "available_after_bytes": 110 * GIB}  # fmt: skip
FAKE_LOCK_TIME = 1_800_000_000.0  # 2027-01-15T08:00:00Z: when the fake nodes' lock calls answer


def default_collector(node: NodeSpec, args: Sequence[str], sudo: bool) -> dict[str, Any]:
    """A healthy node: every path exists, every port is free, one GPU, capped as asked."""
    what = args[0]
    gpu = {"index": 0, "name": "GB10", "locked_clock_max_mhz": None}
    if what == "paths":
        return {"ok": True, "paths": {p: {"exists": True} for p in args[1:]}}
    if what == "ports":
        return {"ok": True, "ports": {args[-1]: {"free": True}}}
    doc: dict[str, Any] = {"ok": True, "action": what, "nvml": {"available": True}, "gpus": [gpu]}
    if what in ("cap", "reset"):  # the lock call answers SUCCESS; the node records it
        mhz = int(args[1]) if what == "cap" else None
        answers = [LockAnswer(index=0, answer="SUCCESS", code=0)]
        record = make_record(what, mhz, answers, FAKE_LOCK_TIME)
        doc["clock_cap"] = {
            "record": record,
            "reason": None,
            "path": "/run/tpwarden/clock-cap.json",
        }
        gpu["locked_clock_max_mhz"] = mhz
    else:
        doc["clock_cap"] = {"record": None, "reason": "no lock call recorded since boot"}
    return doc


class FakeNodes:
    """`Nodes` over fakes. `down` nodes raise NodeUnreachable; `frozen` nodes never answer
    (until `thaw()`); `collect(node, args, sudo)` scripts the collector's JSON."""

    def __init__(self, spec: ClusterSpec, image_everywhere: bool = True) -> None:
        self.spec = spec
        self.engines = {n.name: FakeDocker(n.name, self) for n in spec.nodes}
        self.sessions = {n.name: FakeSession(n.name) for n in spec.nodes}
        if image_everywhere:
            for gw in self.engines.values():
                gw.images.add(spec.serving.image)
        self.down: set[str] = set()
        self.frozen: set[str] = set()
        self._thawed = threading.Event()
        self.collect: Callable[[NodeSpec, Sequence[str], bool], dict[str, Any]] = default_collector
        self.collector_calls: list[tuple[str, tuple[str, ...], bool]] = []
        # what the collector's global --memory/--drop-caches and --rdma answer (a GB10 node:
        # unified memory, 119.7 GiB, page cache dropped; no RDMA device)
        self.memory: dict[str, dict[str, Any]] = {}
        self.page_cache: dict[str, dict[str, Any]] = {}
        self.rdma: dict[str, dict[str, Any]] = {}
        # `collector_beside(node, container, args)` scripts a diagnostic container's collector
        self.beside: Callable[[NodeSpec, ContainerInfo, Sequence[str]], dict[str, Any]] | None = (
            None
        )
        self.beside_calls: list[tuple[str, str, tuple[str, ...], float]] = []
        self.actions: list[tuple[str, str, str]] = []
        self._lock = threading.Lock()
        self.closed = False

    # -- scripting ---------------------------------------------------------------------------
    @classmethod
    def running(cls, spec: Any) -> FakeNodes:
        """Nodes on which `spec`'s cluster already runs (as after a successful `up`)."""
        nodes = cls(spec)
        nodes.run_all()
        return nodes

    def run_all(self, state: str = "running") -> None:
        """Every node runs this spec's container (as after a successful `up`)."""
        for c in plan_cluster(self.spec).containers:
            self.engines[c.node].add(c, state)

    def gate(self, node: str) -> None:
        if node in self.down:
            raise NodeUnreachable(node, "connection refused")
        if node in self.frozen:
            self._thawed.wait(30)

    def streams_closed(self) -> list[bool]:
        return [st.closed.is_set() for gw in self.engines.values() for st in gw.streams]

    def thaw(self) -> None:
        self._thawed.set()

    def record(self, what: str, node: str, container: str) -> None:
        with self._lock:
            self.actions.append((what, node, container))

    # -- the Nodes protocol ------------------------------------------------------------------
    def session(self, node: NodeSpec) -> FakeSession:
        self.gate(node.name)
        return self.sessions[node.name]

    def docker(self, node: NodeSpec) -> FakeDocker:
        return self.engines[node.name]

    def collector(
        self, node: NodeSpec, args: Sequence[str], sudo: bool = False, timeout: float = 60.0
    ) -> dict[str, Any]:
        self.gate(node.name)
        with self._lock:
            self.collector_calls.append((node.name, tuple(args), sudo))
        # the collector's global `--path P` (any action): the scripted `paths` answer, merged;
        # --rdma, --memory and --drop-caches MODE: the node's scripted facts
        also_paths: list[str] = []
        flags: set[str] = set()
        rest = list(args)
        while rest[:1] and rest[0] in ("--path", "--rdma", "--memory", "--drop-caches"):
            if rest[0] in ("--path", "--drop-caches"):
                (also_paths if rest[0] == "--path" else []).append(rest[1])
                flags.add(rest[0])
                rest = rest[2:]
            else:
                flags.add(rest[0])
                rest = rest[1:]
        doc = self.collect(node, rest, sudo)
        if also_paths:
            doc["paths"] = self.collect(node, ["paths", *also_paths], sudo).get("paths", {})
        if "--rdma" in flags:
            doc["rdma"] = self.rdma.get(
                node.name, {"hcas": [], "dev_infiniband": {"present": False, "entries": []}}
            )
        if "--drop-caches" in flags:
            doc["page_cache"] = self.page_cache.get(node.name, dict(GB10_PAGE_CACHE))
        if flags & {"--memory", "--drop-caches"}:
            doc["memory"] = self.memory.get(node.name, dict(GB10_MEMORY))
        return doc

    def collector_beside(
        self, node: NodeSpec, container: ContainerInfo, args: Sequence[str], timeout: float
    ) -> dict[str, Any]:
        with self._lock:
            self.beside_calls.append((node.name, container.id, tuple(args), timeout))
        if self.beside is None:
            raise DockerError(f"{node.name}: no diagnostic container scripted")
        return self.beside(node, container, args)

    def fan_out(
        self, nodes: Sequence[NodeSpec], fn: Callable[[NodeSpec], T], timeout: float | None = None
    ) -> dict[str, T | TpwardenError]:
        return fan_out(nodes, fn, timeout)

    def close(self) -> None:
        self.closed = True
        self.thaw()
