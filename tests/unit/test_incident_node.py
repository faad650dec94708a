"""The node's part of a dossier, for real on this machine (issue 32): a child Python process
is SIGSTOPped and `collector dossier` reads it from /proc and with the real py-spy binary
(a dependency of tpwarden, installed beside it)."""

from __future__ import annotations

import importlib.metadata
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tpwarden.node import collector
from tpwarden.node.dossier import collect_dossier

CHILD = """
import sys, threading, time
def hold_the_line():
    while True:
        time.sleep(0.05)
threading.Thread(target=hold_the_line, name="holder", daemon=True).start()
print("ready", flush=True)
hold_the_line()
"""


def pyspy_binary() -> str:
    dist = importlib.metadata.distribution("py-spy")
    found = [dist.locate_file(f) for f in dist.files or [] if Path(str(f)).name == "py-spy"]
    assert found, "py-spy is a dependency of tpwarden: its binary must be installed"
    return str(Path(str(found[0])).resolve())


@pytest.fixture
def stopped_child() -> Iterator[int]:
    proc = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        os.kill(proc.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 5
        while Path(f"/proc/{proc.pid}/stat").read_text().split(") ")[1][0] != "T":
            assert time.monotonic() < deadline, "the child did not stop"
            time.sleep(0.01)
        yield proc.pid
    finally:
        os.kill(proc.pid, signal.SIGCONT)
        proc.kill()
        proc.wait(timeout=10)


def test_collector_dossier_reads_a_stopped_process_state_cpu_and_stack(
    stopped_child: int, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["dossier", "--pid", str(stopped_child), "--window", "0.3", "--since", "60"]
    rc = collector.main([*argv, "--pyspy", pyspy_binary()])
    doc = json.loads(capsys.readouterr().out)
    assert doc["action"] == "dossier" and "gpus" in doc and "nvml" in doc
    assert rc == 0, doc["error"]
    part = doc["dossier"]
    [proc] = part["processes"]
    assert (proc["pid"], proc["state"], proc["wchan"]) == (stopped_child, "T", "do_signal_stop")
    assert proc["cpu_delta_s"] == 0.0 and proc["threads"] == 2
    stack = proc["pyspy"]
    assert stack["nonblocking"] is True and stack["error"] is None, stack
    frames = [f for t in stack["threads"] for f in t["frames"]]
    assert any(f.startswith("hold_the_line (<string>:") for f in frames), frames
    kernel = part["kernel"]
    assert kernel["source"] is not None or any(
        f.startswith("kernel log:") for f in part["findings"]
    )
    assert part["took_s"] < 6


def test_what_cannot_be_had_is_a_finding(tmp_path: Path) -> None:
    part = collect_dossier(
        [2**22 + 777],
        window_s=0.0,
        pyspy=[str(tmp_path / "none")],
        kernel_log=lambda since: {"source": None, "events": [], "reason": "dmesg: not installed"},
    )
    assert part["processes"] == [] and part["missing_roots"] == [2**22 + 777]
    assert part["findings"][0].startswith(f"process {2**22 + 777} not in this node's /proc")
    assert "kernel log: dmesg: not installed" in part["findings"]


@pytest.fixture
def sleeping_child() -> Iterator[int]:
    proc = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        yield proc.pid
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_a_container_the_engine_calls_paused_is_dumped_nonblocking(
    sleeping_child: int, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """`--frozen` (the engine says paused) where the freezer cannot be read (as from a
    diagnostic container): every dump nonblocking, every unreadable freezer state frozen;
    `--no-kernel-log` reads none. Without `--frozen` a sleeping process is dumped blocking."""
    argv = ["dossier", "--pid", str(sleeping_child), "--window", "0.1", "--no-kernel-log"]
    assert collector.main([*argv, "--pyspy", pyspy_binary()]) == 0
    [plain] = json.loads(capsys.readouterr().out)["dossier"]["processes"]
    assert plain["state"] in ("S", "R") and plain["pyspy"]["nonblocking"] is False
    part = collect_dossier(
        [sleeping_child], window_s=0.1, pyspy=[pyspy_binary()], kernel_log=None,
        cgroup_root=str(tmp_path), all_frozen=True,
    )  # fmt: skip
    [proc] = part["processes"]
    assert (proc["frozen"], proc["pyspy"]["nonblocking"], part["missing_roots"]) == (True, True, [])
    assert part["kernel"] == {"source": None, "events": [], "reason": None}
    assert not [f for f in part["findings"] if f.startswith("kernel log")]


def test_the_zipapp_takes_a_dossier_on_a_bare_python3(stopped_child: int, tmp_path: Path) -> None:
    """What the nodes run: the collector zipapp on python3 without site-packages (-I -S)."""
    from tpwarden.cluster.node_zipapp import COLLECTOR, build_node_zipapp

    app = build_node_zipapp(COLLECTOR, tmp_path / "c.pyz").path
    argv = ["dossier", "--pid", str(stopped_child), "--window", "0.2", "--pyspy", pyspy_binary()]
    out = subprocess.run(
        [sys.executable, "-I", "-S", str(app), "--nvml-lib", "/nonexistent/nvml.so", *argv],
        capture_output=True,
        text=True,
        timeout=60,
    )
    doc = json.loads(out.stdout)
    assert out.returncode == 0, (doc["error"], out.stderr[-500:])
    [proc] = doc["dossier"]["processes"]
    assert proc["state"] == "T" and proc["pyspy"]["error"] is None
    assert doc["nvml"]["available"] is False  # the missing library is a state, not a failure
