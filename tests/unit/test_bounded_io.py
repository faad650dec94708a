"""Issue 15 (2): every network wait is bounded; a frozen node cannot keep a command alive."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from tpwarden.cluster.errors import NodeUnreachable
from tpwarden.cluster.ssh import gateway as ssh_mod
from tpwarden.cluster.ssh.connect import SshOptions, SshTarget
from tpwarden.cluster.ssh.gateway import NodeSession

ROOT = Path(__file__).resolve().parents[2]

FROZEN_FAN_OUT = """
import sys, threading
from tpwarden.cluster.control.controller import Controller
from tpwarden.cluster.inventory.load import load_inventory
spec = load_inventory(sys.argv[1])
ctl = Controller(spec)
frozen = threading.Event()
def call(node):
    if node.name == spec.nodes[1].name:
        frozen.wait()  # a node frozen mid-call: never returns
    return "ok"
r = ctl.fan_out(list(spec.nodes), call, timeout=0.5)
ctl.close()
print(sorted(type(v).__name__ for v in r.values()), flush=True)
"""


def test_frozen_node_row_says_so_and_the_command_exits() -> None:
    # Reproduction: `tpwarden status` printed, then hung (non-daemon workers blocked).
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", FROZEN_FAN_OUT, str(ROOT / "inventory.example.yml")],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0, proc.stderr
    assert "NodeUnreachable" in proc.stdout and proc.stdout.count("'str'") == 3
    assert time.monotonic() - t0 < 15


class _Chan:
    """A channel over one end of a socketpair (what paramiko's SFTP client talks to)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.closed = False

    def settimeout(self, t: float | None) -> None:
        self.sock.settimeout(t)

    def invoke_subsystem(self, name: str) -> None:
        pass

    def get_name(self) -> str:
        return "sftp"

    def send(self, data: bytes) -> int:
        return self.sock.send(data)

    def recv(self, n: int) -> bytes:
        return self.sock.recv(n)

    def close(self) -> None:
        self.closed = True
        self.sock.close()


def _frozen_sftp_server(sock: socket.socket) -> None:
    """Answers the SFTP version handshake, then freezes (a node stopped mid-session)."""
    sock.recv(4096)
    sock.sendall(b"\x00\x00\x00\x05\x02\x00\x00\x00\x03")
    time.sleep(30)


def test_sftp_on_a_frozen_node_times_out_and_closes_the_session(monkeypatch) -> None:
    monkeypatch.setattr(ssh_mod, "SFTP_TIMEOUT_S", 0.5)
    ours, theirs = socket.socketpair()
    threading.Thread(target=_frozen_sftp_server, args=(theirs,), daemon=True).start()
    opened: list[float | None] = []

    class Transport:
        def open_session(self, timeout: float | None = None) -> _Chan:
            opened.append(timeout)
            return _Chan(ours)

    class Client:
        def get_transport(self) -> Transport:
            return Transport()

    session = NodeSession(SshTarget("node1", "127.0.0.1"), SshOptions())
    monkeypatch.setattr(session, "client", lambda: Client())
    t0 = time.monotonic()
    with pytest.raises(NodeUnreachable, match="no answer within 0.5 s"):
        session.read_bytes("/etc/tpwarden/secrets/api_key")
    assert time.monotonic() - t0 < 5
    assert opened == [SshOptions().connect_timeout_s]  # the channel open is bounded too
    assert session._sftp is None  # the stuck session was closed; the next call opens a new one
