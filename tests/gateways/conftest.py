"""A real OpenSSH server for gateway tests, started by the fixture on 127.0.0.1:<free port>.

It runs as root (this test tier needs root: sshd refuses to run otherwise), with a temporary host
key and a temporary authorized key, and stops when the session ends.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import docker
import pytest
from docker.models.containers import Container

SSHD = "/usr/sbin/sshd"


@dataclass(frozen=True)
class Sshd:
    host: str
    port: int
    user: str
    client_key: str  # private key file for the client
    known_hosts: str  # a known_hosts file holding the server's real key
    host_pubkey: str  # the server's public key line
    tmp: Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)


def _wait_listening(host: str, port: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"sshd did not listen on {host}:{port}")


@pytest.fixture(scope="session")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    if os.geteuid() != 0 or not os.path.exists(SSHD) or not shutil.which("ssh-keygen"):
        pytest.skip("needs root and OpenSSH (sshd, ssh-keygen)")
    tmp = tmp_path_factory.mktemp("sshd")
    os.chmod(tmp, 0o700)
    _keygen(tmp / "host_key")
    _keygen(tmp / "client_key")
    (tmp / "authorized_keys").write_text((tmp / "client_key.pub").read_text())
    port = _free_port()
    config = tmp / "sshd_config"
    config.write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {tmp / 'host_key'}\n"
        f"AuthorizedKeysFile {tmp / 'authorized_keys'}\nPidFile {tmp / 'sshd.pid'}\n"
        "PermitRootLogin prohibit-password\nPasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
        "Subsystem sftp internal-sftp\nLogLevel ERROR\nMaxSessions 64\nMaxStartups 64\n"
    )
    os.makedirs("/run/sshd", exist_ok=True)
    proc = subprocess.Popen(
        [SSHD, "-D", "-e", "-f", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=open(tmp / "sshd.log", "wb"),
    )
    try:
        _wait_listening("127.0.0.1", port)
        host_pub = (tmp / "host_key.pub").read_text().split()
        line = f"[127.0.0.1]:{port} {host_pub[0]} {host_pub[1]}"
        (tmp / "known_hosts").write_text(line + "\n")
        yield Sshd(
            "127.0.0.1", port, "root", str(tmp / "client_key"), str(tmp / "known_hosts"), line, tmp
        )
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()


TINY_IMAGE = "tpwarden-test/tiny:1"


@pytest.fixture(scope="session")
def tiny_image(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A few-hundred-KB image (dash, coreutils sleep/cat/echo and libc) made with `docker import`:
    no registry, no network."""
    if not shutil.which("docker"):
        pytest.skip("needs the docker CLI and a running engine")
    if (
        subprocess.run(["docker", "image", "inspect", TINY_IMAGE], capture_output=True).returncode
        == 0
    ):
        return TINY_IMAGE
    root = tmp_path_factory.mktemp("tinyroot")
    files = {
        "/bin/sh": "/bin/dash",
        "/bin/sleep": "/bin/sleep",
        "/bin/cat": "/bin/cat",
        "/bin/echo": "/bin/echo",
        "/bin/env": "/usr/bin/env",
    }
    libs: set[str] = set()
    for src in files.values():
        out = subprocess.run(["ldd", src], capture_output=True, text=True).stdout
        for line in out.splitlines():
            parts = line.split()
            for p in parts:
                if p.startswith("/"):
                    libs.add(p)
    for dst, src in [*files.items(), *((lib, lib) for lib in libs)]:
        target = root / dst.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(os.path.realpath(src), target)
    tar = subprocess.run(["tar", "-C", str(root), "-c", "."], capture_output=True, check=True)
    subprocess.run(
        ["docker", "import", "-", TINY_IMAGE], input=tar.stdout, check=True, capture_output=True
    )
    return TINY_IMAGE


@pytest.fixture
def sleeper(tiny_image: str) -> Iterator[Container]:
    """A tiny container sleeping 300 s with no network, removed after the test."""
    box = docker.from_env().containers.run(
        tiny_image, ["/bin/sleep", "300"], name=f"tpwarden-sleeper-{uuid.uuid4().hex[:6]}",
        detach=True, network_mode="none",
    )  # fmt: skip
    try:
        yield box
    finally:
        box.remove(force=True)
