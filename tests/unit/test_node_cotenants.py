"""The state sample's co-tenants: grouped by command name, containers excluded by cgroup, the
collector's own chain and tpwarden's tools left out; and one real CPU-hungry process found by
`collector state` on this machine, by psutil and by /proc."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tpwarden.node import cotenants
from tpwarden.node.cotenants import Proc, is_own_tool, summarize

CID = "f" * 64


def _p(pid: int, comm: str, cpu: float, *, ppid: int = 1, rss: int = 10 * 2**20,
       cg: str = "0::/user.slice", argv: tuple[str, ...] = ("x",)) -> Proc:  # fmt: skip
    return Proc(pid, ppid, comm, argv, cpu, rss, 100.0, cg)


def test_groups_by_name_and_leaves_out_containers_own_tools_and_idle_ones() -> None:
    before = {
        10: _p(10, "ollama", 1.0), 11: _p(11, "ollama", 2.0),
        20: _p(20, "vllm", 5.0, cg=f"0::/system.slice/docker-{CID}.scope"),
        30: _p(30, "python3", 0.0, argv=("python3", "/opt/tpwarden/thermal.pyz")),
        40: _p(40, "sshd", 0.0), 50: _p(50, "me", 0.0, ppid=40),
    }  # fmt: skip
    after = {
        10: _p(10, "ollama", 2.5), 11: _p(11, "ollama", 3.0),
        20: _p(20, "vllm", 9.0, cg=f"0::/system.slice/docker-{CID}.scope"),
        30: _p(30, "python3", 0.9, argv=("python3", "/opt/tpwarden/thermal.pyz")),
        40: _p(40, "sshd", 0.01), 50: _p(50, "me", 1.0, ppid=40),
        60: _p(60, "java", 0.0, rss=3 * 2**30),  # started during the window, idle but big
    }  # fmt: skip
    got = summarize(before, after, 1.0, exclude_containers=[CID], self_pid=50)
    assert [(c.comm, c.procs, c.cpu_pct) for c in got] == [("ollama", 2, 250.0), ("java", 1, 0.0)]
    assert got[1].rss_mib == 3072.0
    # without the exclusion the container's process is a co-tenant too
    assert "vllm" in [c.comm for c in summarize(before, after, 1.0, self_pid=50)]


@pytest.mark.parametrize(
    "argv",
    [
        # the units' ExecStart lines (playbooks/roles/units/templates, default prefix)
        ("/opt/tpwarden/venv/bin/python", "/opt/tpwarden/venv/bin/tpwarden", "thermal", "agent"),
        ("/opt/tpwarden/venv/bin/python", "-m", "tpwarden.node.collector", "cap", "2000"),
        ("/srv/tools/venv/bin/python3", "-m", "tpwarden.node.collector", "cap", "2000"),
        ("/srv/tools/venv/bin/python3", "/srv/tools/venv/bin/tpwarden", "watchdog", "run"),
        # the collector over SSH (cluster.node_zipapp.COLLECTOR_FILE), a zipapp agent
        ("python3", "/tmp/tmp.k3x/tpwarden-collector.pyz", "state", "--window", "2"),
        ("python3", "-u", "/opt/tpwarden/thermal.pyz"),
        ("/usr/local/bin/tpwarden", "report", "-i", "inv.yml"),
    ],
)
def test_tpwardens_own_tools_are_known_by_their_program(argv: tuple[str, ...]) -> None:
    assert is_own_tool(argv)


@pytest.mark.parametrize(
    "argv",
    [
        ("/bin/sh", "/tmp/tpwarden-pure-tests/t0/ledger-burner"),
        ("/tmp/tpwarden-pure-tests/t0/ledger-burner",),
        ("vim", "/home/u/tpwarden/notes.md"),
        ("python3", "-c", "import tpwarden"),
        ("python3", "/home/u/bench.py", "--out", "/opt/tpwarden/out"),
        ("python3", "-W", "ignore", "/home/u/tpwarden_like.py"),
        ("python3", "-m", "tpwardenish"),
        ("ollama", "serve"),
        (),
    ],
)
def test_a_command_that_only_mentions_tpwarden_is_a_cotenant(argv: tuple[str, ...]) -> None:
    assert not is_own_tool(argv)


def test_a_reused_pid_counts_from_zero() -> None:
    before = {7: Proc(7, 1, "old", ("old",), 500.0, 0, 1.0, "")}
    after = {7: Proc(7, 1, "new", ("new",), 0.3, 0, 2.0, "")}
    (c,) = summarize(before, after, 1.0)
    assert (c.comm, c.cpu_pct) == ("new", 30.0)


def _own_core() -> None:
    """In the burner, after its setsid: its session at nice -10. With autogroup scheduling (as
    on this machine) a session is one scheduling entity and a process's own nice counts only
    inside it; where there is no autogroup, the process's nice counts. As root; elsewhere the
    caller's priority stays."""
    with contextlib.suppress(OSError):
        with open("/proc/self/autogroup", "w") as fh:
            fh.write("-10")
    with contextlib.suppress(PermissionError):
        os.setpriority(os.PRIO_PROCESS, 0, -10)


@pytest.fixture
def burner(tmp_path: Path):  # noqa: ANN201
    # Under a folder whose name starts with tpwarden, as the test command's --basetemp is: a
    # co-tenant's path that merely contains the word is no tpwarden tool (stop 56's CI hid it).
    script = tmp_path / "tpwarden-pure-tests" / "ledger-burner"
    script.parent.mkdir()
    script.write_text("#!/bin/sh\nwhile :; do :; done\n")
    script.chmod(0o755)
    # The test command runs this tier at nice 10 beside two busy lab lanes: the burner runs in a
    # session of its own at nice -10 (`_own_core`), a process that gets its core as a real
    # co-tenant on a quiet node would. (CI4 and stop 56's CI missed it for another reason: its
    # folder's name, see above.)
    proc = subprocess.Popen([str(script)], start_new_session=True, preexec_fn=_own_core)
    time.sleep(0.2)
    yield proc
    proc.kill()
    proc.wait()


@pytest.mark.parametrize("source", ["psutil", "/proc"])
def test_collector_state_names_a_real_cpu_hungry_process(burner, source, monkeypatch) -> None:  # noqa: ANN001
    if source == "/proc":
        monkeypatch.setattr(cotenants, "_snapshot_psutil", lambda root: None)
    from tpwarden.node import collector  # the collector's own main, in this process

    out = []
    monkeypatch.setattr(
        sys, "stdout", type("W", (), {"write": out.append, "flush": lambda s: None})()
    )
    assert collector.main(["state", "--window", "0.6"]) == 0
    doc = json.loads("".join(out))
    assert doc["state"]["source"] == source
    mine = [c for c in doc["state"]["cotenants"] if c["comm"] == "ledger-burner"]
    assert mine and mine[0]["cpu_pct"] > 20 and burner.pid in mine[0]["pids"]
    assert os.getpid() not in [p for c in doc["state"]["cotenants"] for p in c["pids"]]
