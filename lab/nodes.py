"""The lab's nodes: systemd-nspawn containers sharing the host network, one sshd each.

Each node's root is an overlay (the cached Debian rootfs below, a per-node upper dir above), so a
node costs a few MiB and starts in about a second. Per node: its own hostname, machine-id, SSH
host key (generated at every ``lab up``), sshd on 127.0.0.1N:22 (root, lab key only),
/etc/tpwarden, /var/lib/tpwarden, a 16 MiB tmpfs at /var/log/tpwarden, fake ACPI zones at
/sys/class/thermal, its GPU state dir and the NVML stand-in (no pynvml: a node's python3 has
only the standard library, as on a fresh real node; tpwarden bundles or provisions what it
needs), the host's Docker engine socket and docker CLI, and the lab models dir at the same path
as on the host.
"""

from __future__ import annotations

import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path

from tpwarden.cluster.errors import LabError
from tpwarden.lab import host, sensord, sshc
from tpwarden.lab.paths import NODE_GPU_DIR, LabPaths, NodePaths

LOG_FS_SIZE = "16m"
READY_TIMEOUT_S = 120
STOP_GRACE_S = 30
NVML_TARGET = "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"
NODE_DOCKER_CLI = "/usr/local/bin/docker"
DOCKER_SOCKET = Path("/run/docker.sock")


@dataclass(frozen=True)
class NodeAssets:
    """Host files every node gets (resolved once per ``lab up``)."""

    lower: Path  # the cached node rootfs
    client_pubkey: str
    docker_cli: Path
    nvml_lib: Path | None  # None: the NVML stub is not built (hook: see lab.py)


def find_assets(lower: Path, paths: LabPaths, nvml_lib: Path | None) -> NodeAssets:
    cli = shutil.which("docker")
    if cli is None:
        raise LabError("no docker CLI on this host (the nodes reuse it as their docker client)")
    return NodeAssets(
        lower=lower,
        client_pubkey=paths.key.with_suffix(".pub").read_text(),
        docker_cli=Path(os.path.realpath(cli)),
        nvml_lib=nvml_lib,
    )


def ensure_client_key(paths: LabPaths) -> None:
    """Create the lab's client key once, and a HOME whose ~/.ssh uses it and the lab known_hosts.

    docker-py's ``ssh://`` transport (paramiko) reads only ~/.ssh/config and ~/.ssh/known_hosts
    and rejects unknown hosts; pointing HOME at ``paths.ssh_home`` gives it the lab's key and
    known_hosts without turning host-key checking off.
    """
    paths.ssh.mkdir(parents=True, exist_ok=True, mode=0o700)
    if not paths.key.is_file():
        host.run(
            [
                "ssh-keygen",
                "-q",
                "-t",
                "ed25519",
                "-N",
                "",
                "-C",
                "tpwarden-lab",
                "-f",
                str(paths.key),
            ]
        )
    dot_ssh = paths.ssh_home / ".ssh"
    dot_ssh.mkdir(parents=True, exist_ok=True, mode=0o700)
    config = "".join(
        f"Host {n.ip}\n  User root\n  IdentityFile {paths.key}\n"
        f"  UserKnownHostsFile {paths.known_hosts}\n  StrictHostKeyChecking yes\n"
        for n in paths.all_nodes()
    )
    host.write_atomic(dot_ssh / "config", config, 0o600)
    link = dot_ssh / "known_hosts"
    if not link.is_symlink():
        link.unlink(missing_ok=True)
        link.symlink_to(paths.known_hosts)


def is_running(node: NodePaths) -> bool:
    return host.read_pid(node.pidfile) is not None


def prepare(node: NodePaths, assets: NodeAssets) -> None:
    """Mount the node's root and log fs and write its own files (idempotent)."""
    for d in (node.upper, node.work, node.merged, node.logfs, node.thermal, node.gpu):
        d.mkdir(parents=True, exist_ok=True)
    host.mount(
        "overlay",
        "overlay",
        node.merged,
        f"lowerdir={assets.lower},upperdir={node.upper},workdir={node.work}",
    )
    host.mount("tmpfs", "tpwarden-lab-log", node.logfs, f"size={LOG_FS_SIZE},mode=0755")
    root = node.merged
    ip = node.ip
    _write(root / "etc/hostname", f"{node.name}\n")
    _write(
        root / "etc/hosts",
        f"127.0.0.1\tlocalhost\n{ip}\t{node.name}\n::1\tlocalhost ip6-localhost ip6-loopback\n",
    )
    if not (node.upper / "etc/machine-id").is_file():
        _write(root / "etc/machine-id", uuid.uuid4().hex + "\n")
    _host_key(node)
    _write(
        root / "etc/ssh/sshd_config.d/tpwarden-lab.conf",
        f"# tpwarden lab: {node.name}\nListenAddress {ip}\nPort 22\n"
        "HostKey /etc/ssh/ssh_host_ed25519_key\nPermitRootLogin prohibit-password\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUseDNS no\n",
    )
    _authorize(root / "root/.ssh/authorized_keys", assets.client_pubkey)
    (root / "root/.ssh").chmod(0o700)
    for sub in ("etc/tpwarden", "var/lib/tpwarden", "var/log/tpwarden"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    (root / "usr/local/lib/python3.11/dist-packages/pynvml.py").unlink(
        missing_ok=True
    )  # older labs
    if assets.nvml_lib is not None:
        _copy(assets.nvml_lib, root / NVML_TARGET)
    sensord.boot_sensors(node)  # idle readings; a clock cap does not survive a boot


def _authorize(path: Path, pubkey: str) -> None:
    """The lab's client key in root's authorized_keys, keeping the keys already there: a real
    node's boot keeps what provisioning authorized (the watchdog's own key)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    have = path.read_text() if path.is_file() else ""
    if pubkey.strip() in (line.strip() for line in have.splitlines()):
        return
    lead = have if not have or have.endswith("\n") else have + "\n"
    host.write_atomic(path, lead + pubkey.rstrip("\n") + "\n", 0o600)


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.is_file() or path.read_text() != text:
        host.write_atomic(path, text, mode)


def _copy(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    if not dst.is_file() or dst.read_bytes() != src.read_bytes():
        shutil.copy2(src, dst)


def _host_key(node: NodePaths) -> None:
    """Give the node its own ed25519 host key (the rootfs's shared keys are removed)."""
    if (node.upper / "etc/ssh/ssh_host_ed25519_key").is_file():
        return
    ssh_dir = node.merged / "etc/ssh"
    for old in ssh_dir.glob("ssh_host_*"):
        old.unlink()
    host.run(
        [
            "ssh-keygen",
            "-q",
            "-t",
            "ed25519",
            "-N",
            "",
            "-C",
            f"root@{node.name}",
            "-f",
            str(ssh_dir / "ssh_host_ed25519_key"),
        ]
    )


def known_hosts_line(node: NodePaths) -> str:
    key_type, blob = (node.merged / "etc/ssh/ssh_host_ed25519_key.pub").read_text().split()[:2]
    return f"{node.ip} {key_type} {blob}\n"


def nspawn_argv(node: NodePaths, paths: LabPaths, assets: NodeAssets) -> list[str]:
    binds = [
        f"--bind={node.thermal}:/sys/class/thermal",
        f"--bind={node.logfs}:/var/log/tpwarden",
        f"--bind={node.gpu}:{NODE_GPU_DIR}",
        f"--bind={paths.models}:{paths.models}",  # identity mapping: see README
        f"--bind-ro={paths.secrets}:{paths.secrets}",  # identity mapping too
        f"--bind={DOCKER_SOCKET.resolve()}:/run/docker.sock",
        f"--bind-ro={assets.docker_cli}:{NODE_DOCKER_CLI}",
    ]
    return [
        "systemd-nspawn",
        "-D",
        str(node.merged),
        "-b",
        "--register=no",
        "--keep-unit",
        f"--machine={node.machine}",
        "--console=read-only",
        "--link-journal=no",
        *binds,
    ]


def start(node: NodePaths, paths: LabPaths, assets: NodeAssets) -> None:
    if is_running(node):
        return
    if not DOCKER_SOCKET.exists():
        raise LabError(f"the Docker engine socket {DOCKER_SOCKET} is missing (start dockerd)")
    node.log.unlink(missing_ok=True)
    host.start_detached(nspawn_argv(node, paths, assets), node.log, node.pidfile)


def wait_ready(node: NodePaths, paths: LabPaths, timeout_s: float = READY_TIMEOUT_S) -> str:
    """Poll until sshd answers and systemd reports running/degraded; return that state."""
    ip = node.ip
    state = {"last": "no sshd"}

    def ready() -> bool:
        if not is_running(node):
            raise LabError(f"{node.name}: systemd-nspawn exited; see {node.log}")
        if not host.tcp_open(ip, 22):
            return False
        try:
            done = sshc.run_once(
                ip, paths.key, paths.known_hosts, ["systemctl", "is-system-running"], timeout_s=10
            )
        except LabError as exc:
            state["last"] = str(exc)
            return False
        state["last"] = done.stdout.strip()
        return state["last"] in ("running", "degraded")

    if not host.wait_for(ready, timeout_s, 0.3):
        raise LabError(
            f"{node.name} not ready after {timeout_s:g} s ({state['last']}); see {node.log}"
        )
    return state["last"]


def leader_pid(node: NodePaths) -> int:
    """The pid of the node's init (systemd), for nsenter."""
    pid = host.read_pid(node.pidfile)
    kids = host.children(pid) if pid else []
    if not kids:
        raise LabError(f"{node.name} is not running")
    return kids[0]


def nsenter(node: NodePaths, argv: list[str], timeout: float = 60) -> str:
    return host.run(
        ["nsenter", "-t", str(leader_pid(node)), "-m", "-u", "-i", "-p", "--", *argv],
        timeout=timeout,
    )


def stop(node: NodePaths) -> None:
    """Shut the node down (SIGTERM = clean poweroff, then SIGKILL) and remove its mounts/dir."""
    host.stop_group(node.pidfile, STOP_GRACE_S)
    host.umount(node.merged)
    host.umount(node.logfs)
    if node.dir.exists():
        shutil.rmtree(node.dir)
