"""Debian root filesystems built offline with mmdebstrap, cached by a hash of their inputs.

One machinery serves both the nodes (a directory, used as the overlay's lower layer) and the
Docker base image (a tarball for ``docker import``). Inputs: suite, variant, package list,
output format, and the bytes of the machine's own apt sources file (passed to mmdebstrap as its
MIRROR argument, so the lab uses whatever mirror this machine is configured for).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from tpwarden.cluster.errors import LabError
from tpwarden.lab import host
from tpwarden.lab.paths import StepCallback, no_steps

APT_SOURCES = Path("/etc/apt/sources.list.d/debian.sources")
_BUILD_TIMEOUT_S = 1800


@dataclass(frozen=True, kw_only=True)
class RootfsSpec:
    """What to bootstrap. ``fmt`` is "dir" (a directory) or "tar" (a tarball)."""

    name: str
    packages: tuple[str, ...]
    variant: str = "apt"
    suite: str = "bookworm"
    fmt: str = "dir"

    def inputs_hash(self, sources: bytes) -> str:
        doc = {
            "name": self.name,
            "packages": sorted(self.packages),
            "variant": self.variant,
            "suite": self.suite,
            "fmt": self.fmt,
            "sources": hashlib.sha256(sources).hexdigest(),
        }
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]


# The nodes: a booting systemd with sshd and python3 (for Ansible). The docker CLI is not
# installed: bookworm has no docker-cli package (docker.io would bring a second engine), so each
# node gets the host's docker client binary bind-mounted read-only (see nodes.py).
NODE_ROOTFS = RootfsSpec(
    name="node",
    packages=(
        "systemd",
        "systemd-sysv",
        "openssh-server",
        "python3",
        "python3-venv",
        "dbus",
        "procps",
        "iproute2",
    ),  # python3-venv: `tpwarden provision` installs tpwarden into a venv (offline)
)

# The Docker base image: what the vLLM simulator needs, nothing more.
BASE_ROOTFS = RootfsSpec(
    name="base",
    packages=("python3", "python3-aiohttp", "ca-certificates"),
    variant="minbase",
    fmt="tar",
)


def sources_bytes(sources: Path = APT_SOURCES) -> bytes:
    try:
        return sources.read_bytes()
    except OSError as exc:
        raise LabError(f"cannot read the machine's apt sources {sources}: {exc}") from exc


def rootfs_path(spec: RootfsSpec, cache: Path, sources: Path = APT_SOURCES) -> Path:
    """Where the cached build for ``spec`` lives (whether or not it exists yet)."""
    digest = spec.inputs_hash(sources_bytes(sources))
    suffix = ".tar" if spec.fmt == "tar" else ""
    return cache / "rootfs" / f"{spec.name}-{digest}{suffix}"


def ensure_rootfs(
    spec: RootfsSpec, cache: Path, sources: Path = APT_SOURCES, on_step: StepCallback = no_steps
) -> Path:
    """Return the cached rootfs for ``spec``, building it first if its inputs changed."""
    target = rootfs_path(spec, cache, sources)
    if target.exists():
        on_step(f"rootfs {spec.name}", f"cached {target.name}")
        return target
    if shutil.which("mmdebstrap") is None:
        raise LabError("mmdebstrap is not installed (apt-get install mmdebstrap)")
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    _remove(partial)
    on_step(f"rootfs {spec.name}", f"mmdebstrap {spec.suite} ({len(spec.packages)} packages)")
    argv = [
        "mmdebstrap",
        f"--variant={spec.variant}",
        f"--include={','.join(spec.packages)}",
        "--quiet",
        spec.suite,
        str(partial),
        str(sources),
    ]
    if spec.fmt == "tar":
        argv.insert(1, "--format=tar")
    try:
        host.run(argv, timeout=_BUILD_TIMEOUT_S)
    except LabError:
        _remove(partial)
        raise
    partial.rename(target)
    on_step(f"rootfs {spec.name}", f"built {target.name}")
    return target


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)
