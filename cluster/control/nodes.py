"""The nodes connector: how cluster control reaches each node, and the one seam its tests fake.

`NodeConnector` holds one SSH session and one Docker gateway per node for the duration of one
tpwarden command, runs the collector zipapp on a node, and fans a call out over nodes on daemon
threads. Everything above it (`tpwarden.cluster.control.controller` and its parts) takes a `Nodes`, so a
test hands in a fake that answers from dicts (as pyinfra tests its operations on a fake host).
"""

from __future__ import annotations

import json
import logging
import os
import platform
import shutil
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, wait
from pathlib import Path
from typing import Protocol, TypeVar

from tpwarden.cluster.containers.gateway import DockerGateway
from tpwarden.cluster.containers.info import ContainerInfo
from tpwarden.cluster.containers.job import OneShot
from tpwarden.cluster.durable import JSONObject
from tpwarden.cluster.errors import CommandFailed, NodeUnreachable, TpwardenError
from tpwarden.cluster.labels import LABEL_CLUSTER, LABEL_COMPONENT, LABEL_NODE
from tpwarden.cluster.node_zipapp import COLLECTOR, COLLECTOR_FILE, build_node_zipapp
from tpwarden.cluster.settings import SshSpec
from tpwarden.cluster.spec import NodeSpec
from tpwarden.cluster.ssh.gateway import NodeSession, SshPool

log = logging.getLogger(__name__)
T = TypeVar("T")
DIAG_PYSPY = "tpwarden-py-spy"  # py-spy's name in a diagnostic container's root


class Nodes(Protocol):
    """What cluster control needs of the nodes; `NodeConnector` is the real one."""

    def session(self, node: NodeSpec) -> NodeSession: ...

    def docker(self, node: NodeSpec) -> DockerGateway: ...

    def collector(
        self, node: NodeSpec, args: Sequence[str], sudo: bool = False, timeout: float = 60.0
    ) -> JSONObject: ...

    def collector_beside(
        self, node: NodeSpec, container: ContainerInfo, args: Sequence[str], timeout: float
    ) -> JSONObject: ...

    def fan_out(
        self, nodes: Sequence[NodeSpec], fn: Callable[[NodeSpec], T], timeout: float | None = None
    ) -> dict[str, T | TpwardenError]: ...

    def close(self) -> None: ...


def is_local(node: NodeSpec) -> bool:
    """The node is this machine: its docker engine is reached by the local socket."""
    return node.ssh_host == "local"


class NodeConnector:
    """SSH sessions, Docker gateways and the collector over real connections, made lazily:
    constructing it connects to nothing."""

    def __init__(self, ssh: SshSpec, *, nvml_lib: str | None = None) -> None:
        self.pool = SshPool(ssh)
        self.nvml_lib = nvml_lib or os.environ.get("TPWARDEN_NVML_LIB")
        self._docker: dict[str, DockerGateway] = {}
        self._docker_lock = threading.Lock()
        self._tmp = tempfile.TemporaryDirectory(prefix="tpwarden-")
        self._collector: Path | None = None
        self._collector_lock = threading.Lock()  # fan-out threads must not build it twice

    def close(self) -> None:
        for gw in list(self._docker.values()):
            gw.close()
        self._docker.clear()
        self.pool.close()
        self._tmp.cleanup()

    def session(self, node: NodeSpec) -> NodeSession:
        return self.pool.session(node)

    def docker(self, node: NodeSpec) -> DockerGateway:
        with self._docker_lock:
            gw = self._docker.get(node.name)
        if gw is not None:
            return gw
        gw = (
            DockerGateway.local(node.name)
            if is_local(node)
            else DockerGateway.over_ssh(self.session(node), timeout=60)
        )
        with self._docker_lock:
            self._docker.setdefault(node.name, gw)
            return self._docker[node.name]

    def collector(
        self, node: NodeSpec, args: Sequence[str], sudo: bool = False, timeout: float = 60.0
    ) -> JSONObject:
        """Copy the collector zipapp to the node, run it with python3, parse its JSON."""
        extra = ["--nvml-lib", self.nvml_lib] if self.nvml_lib else []
        result = self.session(node).run_script(
            str(self._collector_zipapp()),
            [*extra, *args],
            interpreter=["python3"],
            sudo=sudo,
            timeout=timeout,
        )
        return collector_json(node, args, result.rc, result.stdout, result.stderr)

    def collector_beside(
        self, node: NodeSpec, container: ContainerInfo, args: Sequence[str], timeout: float
    ) -> JSONObject:
        """Run the collector in a throwaway container of `container`'s image on the node's
        engine, in `container`'s PID namespace (its PID 1 is the container's init), as root
        with SYS_PTRACE and no network, with this host's py-spy copied in (`DIAG_PYSPY`; a
        static binary, so it runs in any image of this machine's architecture). For when
        the node's own /proc does not show the container's processes. It is removed when it
        ends; one left by a killed caller is labelled io.tpwarden.component=diagnostic."""
        engine = self.docker(node)
        files = {COLLECTOR_FILE: self._collector_zipapp().read_bytes()}
        pyspy, unfit = local_pyspy(), None
        if pyspy is not None and (arch := engine.architecture()) not in ("", platform.machine()):
            unfit = (
                f"py-spy: this host's is for {platform.machine()}, the node is {arch} (no stacks)"
            )
        elif pyspy is not None:
            files[DIAG_PYSPY] = pyspy.read_bytes()
        job = OneShot(
            image=container.image,
            argv=("python3", f"/{COLLECTOR_FILE}", *args),
            files=files,
            executable=frozenset({DIAG_PYSPY}),
            pid_of=container.id,
            cap_add=("SYS_PTRACE",),
            user="0",
            labels={
                LABEL_COMPONENT: "diagnostic",  # never one of the serving containers (vllm)
                LABEL_NODE: node.name,
                LABEL_CLUSTER: container.labels.get(LABEL_CLUSTER, ""),
            },
            timeout_s=timeout,
        )
        done = engine.run_once(job)
        doc = collector_json(node, args, done.exit_code, done.stdout, done.stderr)
        if unfit and isinstance(doc.get("dossier"), dict):
            doc["dossier"].setdefault("findings", []).append(unfit)
        return doc

    def _collector_zipapp(self) -> Path:
        with self._collector_lock:
            if self._collector is None:
                dest = Path(self._tmp.name) / COLLECTOR_FILE
                self._collector = build_node_zipapp(COLLECTOR, dest).path
            return self._collector

    def fan_out(
        self, nodes: Sequence[NodeSpec], fn: Callable[[NodeSpec], T], timeout: float | None = None
    ) -> dict[str, T | TpwardenError]:
        return fan_out(nodes, fn, timeout)


def collector_json(
    node: NodeSpec, args: Sequence[str], rc: int, stdout: str, stderr: str
) -> JSONObject:
    """The collector's JSON object, or CommandFailed saying what it printed instead."""
    try:
        doc = json.loads(stdout)
    except json.JSONDecodeError:
        doc = None
    if not isinstance(doc, dict):
        raise CommandFailed(node.name, ["collector", *args], rc, stderr or stdout)
    return doc


def local_pyspy() -> Path | None:
    """This host's py-spy: beside this interpreter (tpwarden's venv), else on PATH."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    found = shutil.which("py-spy", path=path)
    return Path(found) if found else None


def fan_out(
    nodes: Sequence[NodeSpec], fn: Callable[[NodeSpec], T], timeout: float | None = None
) -> dict[str, T | TpwardenError]:
    """Run `fn(node)` on every node in parallel; errors and timeouts become values."""
    results: dict[str, T | TpwardenError] = {}
    if not nodes:
        return results
    # One daemon thread per node, not a ThreadPoolExecutor: the interpreter joins executor
    # workers at exit, so a node frozen mid-call kept `tpwarden status` alive after it had
    # printed. A daemon thread blocked on a dead node is abandoned when the command ends.
    futures = {daemon_call(fn, n, f"tpwarden-{n.name}"): n for n in nodes}
    done, _ = wait(futures, timeout=timeout)
    for fut, node in futures.items():
        if fut not in done:
            results[node.name] = NodeUnreachable(node.name, f"no answer within {timeout:g} s")
            continue
        try:
            results[node.name] = fut.result()
        except TpwardenError as e:
            results[node.name] = e
        except Exception as e:  # noqa: BLE001 - one node's bug must not hide the others
            log.exception("%s: unexpected error", node.name)
            results[node.name] = TpwardenError(f"{node.name}: {type(e).__name__}: {e}")
    return results


def daemon_call(fn: Callable[[NodeSpec], T], node: NodeSpec, name: str) -> Future[T]:
    """`fn(node)` on a daemon thread; its outcome in a Future."""
    fut: Future[T] = Future()
    fut.set_running_or_notify_cancel()

    def target() -> None:
        try:
            fut.set_result(fn(node))
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting caller
            fut.set_exception(exc)

    threading.Thread(target=target, name=name, daemon=True).start()
    return fut
