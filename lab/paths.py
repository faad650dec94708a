"""Where the lab keeps its state, and the fixed facts about its four nodes.

A machine can run the lab in two lanes side by side (issue 50: the real engine's tests on one
beside the lab's on the other). A lane is everything one lab owns: its node addresses
(127.0.0.1N in lane 1, 127.0.0.2N in lane 2), nspawn machine names, cluster name and container
label, Prometheus and watchdog ports, lock and state root. What is built once is shared: the
cache (root filesystems, images' inputs, the NVML stand-in) and the Docker images. Lane 1 is
the lab as it always was; `TPWARDEN_LAB_LANE` (or `tpwarden lab ... --lane N`) picks another.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tpwarden.cluster.errors import LabError
from tpwarden.cluster.labels import LABEL_CLUSTER, LABEL_NODE

DEFAULT_ROOT = Path("/var/lib/tpwarden-lab")
ROOT_ENV = "TPWARDEN_LAB_ROOT"
LANE_ENV = "TPWARDEN_LAB_LANE"
LANES = (1, 2)
LOCK_DIR = Path("/run/lock")
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


def node_ip(name: str, lane: int = 1) -> str:
    """node1 -> 127.0.0.11 ... node4 -> 127.0.0.14 in lane 1, 127.0.0.21.. in lane 2 (each
    node's sshd and vLLM address)."""
    return f"127.0.0.{lane}{NODE_NAMES.index(name) + 1}"


def check_lane(lane: int) -> int:
    if lane not in LANES:
        raise LabError(f"unknown lab lane {lane!r} (lanes: {', '.join(map(str, LANES))})")
    return lane


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

    lane: int = 1

    @property
    def machine(self) -> str:
        return (
            f"tpwarden-lab-{self.name}"
            if self.lane == 1
            else f"tpwarden-lab{self.lane}-{self.name}"
        )

    @property
    def ip(self) -> str:
        return node_ip(self.name, self.lane)


@dataclass(frozen=True)
class LabPaths:
    """One lane's layout. ``base`` is the lab's root (default /var/lib/tpwarden-lab): lane 1's
    state root, and the home of the cache every lane shares; lane N keeps its state in
    ``base/laneN``."""

    base: Path
    lane: int = 1

    def __post_init__(self) -> None:
        check_lane(self.lane)

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None, lane: int | None = None) -> LabPaths:
        env = dict(os.environ) if env is None else env
        if lane is None:
            text = env.get(LANE_ENV) or "1"
            try:
                lane = int(text)
            except ValueError:
                raise LabError(f"{LANE_ENV}={text!r}: a lane number ({LANES})") from None
        return cls(Path(env.get(ROOT_ENV) or DEFAULT_ROOT), lane)

    @property
    def root(self) -> Path:
        """This lane's state: nodes, inventory, keys, models, watchdog, Prometheus."""
        return self.base if self.lane == 1 else self.base / f"lane{self.lane}"

    @property
    def cache(self) -> Path:
        """Built once, kept across ``lab down``, shared by the lanes: root filesystems, image
        stamps, NVML stub (``build_lock`` serializes the builds)."""
        return self.base / "cache"

    @property
    def build_lock(self) -> Path:
        return self.cache / ".build.lock"

    @property
    def lock(self) -> Path:
        """One actor per lane (a test run, the demo): ``flock`` on this file."""
        name = "tpwarden-lab" if self.lane == 1 else f"tpwarden-lab-{self.lane}"
        return LOCK_DIR / f"{name}.lock"

    @property
    def cluster_name(self) -> str:
        """The inventory's cluster_name, and the value of the containers' cluster label."""
        return CLUSTER_NAME if self.lane == 1 else f"{CLUSTER_NAME}{self.lane}"

    @property
    def prometheus_listen(self) -> str:
        return f"127.0.0.1:{9090 + 2 * (self.lane - 1)}"

    @property
    def watchdog_metrics_port(self) -> int:
        return 9410 + 10 * (self.lane - 1)

    @property
    def master_port(self) -> int:
        """torch.distributed's port on the head: its TCPStore listens on every address, not
        only the head's, so two lanes cannot share it (EADDRINUSE)."""
        return 29501 + 100 * (self.lane - 1)

    def node_ip(self, name: str) -> str:
        return node_ip(name, self.lane)

    def host_pattern(self) -> re.Pattern[str]:
        """What belongs to this lane on the host, and to no other lane: its node listeners,
        Prometheus and watchdog ports, its containers (cluster label), its mounts and processes
        (paths under its own root: nodes, models, the watchdog's inventory...). Lines of `ss
        -ltn`, `docker ps --format '{{.ID}} {{.Names}} {{.Labels}}'`, `mount`, `ps -eo args`."""
        root = re.escape(str(self.root))
        prom_port = self.prometheus_listen.rsplit(":", 1)[1]
        return re.compile(
            rf"127\.0\.0\.{self.lane}[1-4]:\d+\b"
            rf"|{root}/(?:nodes|prometheus|watchdog|models|secrets|ssh)/|{root}/inventory\.yml"
            rf"|tpwarden\.lab\.sensord {root}$"
            rf"|io\.tpwarden\.cluster={re.escape(self.cluster_name)}(?:,|$)"
            rf"|127\.0\.0\.1:(?:{prom_port}|{self.watchdog_metrics_port})\b"
        )

    @property
    def head_ip(self) -> str:
        return self.node_ip(HEAD)

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
        return NodePaths(name, self.nodes_dir / name, self.lane)

    def all_nodes(self) -> list[NodePaths]:
        return [self.node(n) for n in NODE_NAMES]
