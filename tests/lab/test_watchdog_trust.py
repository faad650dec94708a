"""Issue 15 on real things: a full file system under the watchdog, a frozen node under status.

The full-disk test needs root (a tmpfs of its own) but not the lab; the frozen-node test freezes
one lab node's sshd (SIGSTOP on the host) and runs `tpwarden status` against it.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from tpwarden.watchdog.config import WatchdogConfig
from tpwarden.watchdog.daemon import build_watchdog
from tpwarden.watchdog.policy_state import WatchdogPhase

from tests.lab.conftest import CLI

pytestmark = pytest.mark.lab


@contextlib.contextmanager
def full_tmpfs(path: Path, size: str = "256k"):
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(path: Path) -> None:
    chunk = b"\0" * 4096
    fd = os.open(path / "filler", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        while True:
            try:
                os.write(fd, chunk)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
                if len(chunk) == 1:
                    return
                chunk = chunk[: len(chunk) // 2]
    finally:
        os.close(fd)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Recording:
    def __init__(self) -> None:
        self.restarts: list[str] = []

    def restart(
        self, reason: str, evidence: dict[str, Any], keep_fds: tuple[int, ...] = ()
    ) -> None:
        self.restarts.append(reason)

    def boot_progress(self) -> None:
        return None

    def collect_evidence(self) -> dict[str, Any]:
        return {}

    def collect_dossier(self, reason: str) -> dict[str, Any] | None:
        return None  # takes no dossier

    def server_started_at(self) -> float | None:
        return None  # unknown: no fencing

    def close(self) -> None:
        pass


def test_full_disk_under_the_watchdog_still_restarts_and_alerts(tmp_path: Path) -> None:
    # Reproduction (3): with the event log on a full disk, 10 refused probes gave 10 ENOSPC
    # exceptions, 0 counted failures, 0 restarts, 0 alerts.
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a tmpfs")
    alerts = tmp_path / "alerts.jsonl"
    with full_tmpfs(tmp_path / "state") as state:
        cfg = WatchdogConfig(
            probe_url=f"http://127.0.0.1:{closed_port()}",
            state_dir=str(state),
            interval_s=0.2,
            timeout_s=1.0,
            max_restarts=5,
            model="m",
            metrics_port=0,
            alert_command=("sh", "-c", f"cat >> {alerts}; echo >> {alerts}"),
        )
        actuator = Recording()
        wd = build_watchdog(cfg, actuator)
        wd.open()  # state.json and the first events written while there is room
        wd._state = wd._state.__class__(phase=WatchdogPhase.READY)  # a server that was up
        fill(state)
        for _ in range(10):
            wd.tick()
        reg = wd._metrics.registry
        errors = reg.get_sample_value("tpwarden_watchdog_write_errors_total", {"file": "events"})
        wd.close()
    assert (
        len(actuator.restarts) == 1 and errors and errors >= 5
    )  # a partly used page still takes a few
    sent = [json.loads(line) for line in alerts.read_text().splitlines() if line.strip()]
    assert {"unwritable"} <= {a["category"] for a in sent}


def _listener_pid(ip: str) -> int:
    out = subprocess.run(["ss", "-ltnpH", f"src {ip}:22"], capture_output=True, text=True).stdout
    for part in out.split("pid=")[1:]:
        return int(part.split(",")[0])
    raise AssertionError(f"no sshd listening on {ip}:22: {out!r}")


def _descendants(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-eo", "pid=,ppid="], capture_output=True, text=True).stdout
    children: dict[int, list[int]] = {}
    for line in out.splitlines():
        p, pp = (int(x) for x in line.split())
        children.setdefault(pp, []).append(p)
    todo, seen = [pid], []
    while todo:
        p = todo.pop()
        seen.append(p)
        todo.extend(children.get(p, []))
    return seen


def test_frozen_node_status_says_so_and_exits(lab, tmp_path: Path) -> None:
    # Reproduction (2): `tpwarden status` printed, then hung on a frozen node.
    pids = _descendants(_listener_pid(lab.node_ip("node3")))
    for p in pids:
        os.kill(p, 19)  # SIGSTOP: the node's sshd freezes (TCP still accepted by the kernel)
    try:
        t0 = time.monotonic()
        proc = subprocess.run(
            [*CLI, "status", "-i", str(lab.inventory), "--json", "--timeout", "10"],
            capture_output=True,
            text=True,
            timeout=120,
            env=os.environ | {"TPWARDEN_STATE_DIR": str(tmp_path / "control")},
        )  # fmt: skip
        took = time.monotonic() - t0
    finally:
        for p in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, 18)  # SIGCONT
    doc = json.loads(proc.stdout)
    row = next(n for n in doc["nodes"] if n["node"] == "node3")
    assert not row["reachable"] and took < 40, (took, row)
