"""Where the lab keeps its state, and the fixed facts about its four nodes."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tpwarden.cluster.errors import LabError
from tpwarden.cluster.labels import LABEL_CLUSTER, LABEL_NODE

DEFAULT_ROOT = Path("/var/lib/tpwarden-lab")
ROOT_ENV = "TPWARDEN_LAB_ROOT"
NODE_NAMES = ("node1", "node2", "node3", "node4")
HEAD = NODE_NAMES[0]
CLUSTER_LABEL = LABEL_CLUSTER  # the toolkit's own label names (tpwarden.cluster.labels)
NODE_LABEL = LABEL_NODE
CLUSTER_NAME = "lab"
SERVER_COMPONENT = "vllm"  # the serving containers' io.tpwarden.component (cluster/launch.py)
# Fixed in-node path the NVML stand-in reads (its default); each node's own state dir is
# bind-mounted here.
NODE_GPU_DIR = "/var/lib/tpwarden-lab/gpu"
MODEL_NAME = "GLM-lab-NVFP4"
DRAFTER_NAME = "GLM-lab-DFlash2"

StepCallback = Callable[[str, str], None]


def no_steps(name: str, detail: str) -> None:
    """The default ``on_step``: report nothing."""


def node_ip(name: str) -> str:
    """node1 -> 127.0.0.11 ... node4 -> 127.0.0.14 (each node's sshd and vLLM address)."""
    return f"127.0.0.1{NODE_NAMES.index(name) + 1}"


def node_rank(name: str) -> int:
    return NODE_NAMES.index(name)


@dataclass(frozen=True)
class NodePaths:
    """One node's host-side directory. Everything under it is removed by ``lab down``."""

    name: str
    dir: Path

    @property
    def upper(self) -> Path:
        return self.dir / "upper"

    @property
    def work(self) -> Path:
        return self.dir / "work"

    @property
    def merged(self) -> Path:
        """The node's root filesystem (overlay of the cached rootfs and ``upper``)."""
        return self.dir / "root"

    @property
    def logfs(self) -> Path:
        """A 16 MiB tmpfs, the node's /var/log/tpwarden (so a full log disk is a real ENOSPC)."""
        return self.dir / "log"

    @property
    def thermal(self) -> Path:
        """Fake ACPI zones, the node's /sys/class/thermal."""
        return self.dir / "thermal"

    @property
    def gpu(self) -> Path:
        """The node's GPU state dir, mounted at NODE_GPU_DIR; holds ``state``."""
        return self.dir / "gpu"

    @property
    def gpu_state(self) -> Path:
        return self.gpu / "state"

    @property
    def heat(self) -> Path:
        """Heat override the sensor driver honours (written by ``lab fault heat``)."""
        return self.dir / "heat.json"

    @property
    def pidfile(self) -> Path:
        return self.dir / "nspawn.pid"

    @property
    def log(self) -> Path:
        return self.dir / "nspawn.log"

    @property
    def machine(self) -> str:
        return f"tpwarden-lab-{self.name}"


@dataclass(frozen=True)
class LabPaths:
    """The lab's directory layout under one root (default /var/lib/tpwarden-lab)."""

    root: Path

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> LabPaths:
        env = dict(os.environ) if env is None else env
        return cls(Path(env.get(ROOT_ENV) or DEFAULT_ROOT))

    @property
    def cache(self) -> Path:
        """Built once, kept across ``lab down``: root filesystems, image stamps, NVML stub."""
        return self.root / "cache"

    @property
    def models(self) -> Path:
        """Mounted at the same path inside every node (see README: docker-outside-of-docker)."""
        return self.root / "models"

    @property
    def model(self) -> Path:
        return self.models / MODEL_NAME

    @property
    def drafter(self) -> Path:
        return self.models / DRAFTER_NAME

    @property
    def watchdog_dir(self) -> Path:
        """The lab inventory's watchdog.state_dir: the watchdog watching the lab runs here."""
        return self.root / "watchdog"

    @property
    def sim_faults(self) -> Path:
        return self.model / ".vllm-sim" / "faults.json"

    @property
    def secrets(self) -> Path:
        """Dummy secrets, mounted at the same path inside every node (like ``models``)."""
        return self.root / "secrets"

    @property
    def hf_token(self) -> Path:
        return self.secrets / "hf_token"

    @property
    def ssh(self) -> Path:
        return self.root / "ssh"

    @property
    def key(self) -> Path:
        """The lab's client key: the only way into the nodes (root, key only)."""
        return self.ssh / "id_ed25519"

    @property
    def known_hosts(self) -> Path:
        """Real known_hosts, rewritten from the nodes' host keys at every ``lab up``."""
        return self.ssh / "known_hosts"

    @property
    def ssh_home(self) -> Path:
        """A HOME whose ~/.ssh points at the lab key and known_hosts (for docker-py's ssh://)."""
        return self.ssh / "home"

    @property
    def inventory(self) -> Path:
        return self.root / "inventory.yml"

    @property
    def nodes_dir(self) -> Path:
        return self.root / "nodes"

    @property
    def sensord_pid(self) -> Path:
        return self.root / "sensord.pid"

    @property
    def sensord_log(self) -> Path:
        return self.root / "sensord.log"

    @property
    def prometheus_dir(self) -> Path:
        """The lab's Prometheus: prometheus.yml, data/ (TSDB), prometheus.{pid,log}, listen."""
        return self.root / "prometheus"

    def node(self, name: str) -> NodePaths:
        if name not in NODE_NAMES:
            raise LabError(f"unknown lab node {name!r} (nodes: {', '.join(NODE_NAMES)})")
        return NodePaths(name, self.nodes_dir / name)

    def all_nodes(self) -> list[NodePaths]:
        return [self.node(n) for n in NODE_NAMES]
