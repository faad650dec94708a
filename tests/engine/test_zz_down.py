"""Runs last in the tier: `down` after the head died leaves no rank, container or port behind.
Real vLLM's headless ranks keep running when the head is killed; down must stop them itself.

Another lane of the lab may run beside this one (issue 50: the lab tier on lane 1), so what is
looked for is this lane's: processes in this cluster's containers' cgroups, listeners on this
lane's node addresses, containers with this cluster's label."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest
from tpwarden.lab import faults
from tpwarden.lab.paths import HEAD, NODE_NAMES

pytestmark = pytest.mark.engine

RANK_PROCESS = re.compile(r"vllm serve|VLLM::")


def _cluster_container_ids(cluster: str) -> set[str]:
    out = subprocess.run(
        ["docker", "ps", "-aq", "--no-trunc", "--filter", f"label=io.tpwarden.cluster={cluster}"],
        capture_output=True,
        text=True,
    ).stdout
    return set(out.split())


def _rank_processes(container_ids: set[str]) -> list[str]:
    """Live rank processes whose cgroup is one of these containers'."""
    out = subprocess.run(["ps", "-eo", "pid,stat,args"], capture_output=True, text=True).stdout
    found = []
    for line in out.splitlines()[1:]:
        pid, stat, args = (line.split(None, 2) + ["", ""])[:3]
        if not RANK_PROCESS.search(args) or stat.startswith("Z"):
            continue
        try:
            cgroup = Path(f"/proc/{pid}/cgroup").read_text()
        except OSError:
            continue  # gone meanwhile
        if any(cid in cgroup for cid in container_ids):
            found.append(line)
    return found


def _listening(ips: list[str], port: int) -> list[str]:
    out = subprocess.run(["ss", "-ltnH"], capture_output=True, text=True).stdout
    return [
        line
        for line in out.splitlines()
        if any(re.search(rf"{re.escape(ip)}:{port}\b", line) for ip in ips)
    ]


def test_down_after_head_died_kills_every_rank(engine_server):
    spec = engine_server.spec
    ips = [engine_server.paths.node_ip(n) for n in NODE_NAMES]
    master_port = spec.serving.parallel.master_port
    containers = _cluster_container_ids(spec.name)
    assert len(containers) >= 4, containers
    with engine_server.controller(node_timeout_s=10) as ctl:
        assert len(ctl.status(timeout_s=15).nodes) == 4
        faults.container_action(engine_server.paths, HEAD, "kill")
        time.sleep(3)  # what a crashed head leaves: the headless ranks
        states = {n.node: n.state for n in ctl.status(timeout_s=15).nodes}
        assert states[HEAD] != "running"
        assert [states[n] for n in NODE_NAMES if n != HEAD] == ["running"] * 3, states
        assert len(_rank_processes(containers)) >= 3
        result = ctl.down()
        assert all(o.ok for o in result.outcomes), result.outcomes
        assert all(not cs for cs in ctl.observe().values())
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (
        _rank_processes(containers)
        or _listening(ips, spec.serving.port)
        or _listening(ips, master_port)
    ):
        time.sleep(1)
    assert _rank_processes(containers) == []
    assert _listening(ips, spec.serving.port) == [] and _listening(ips, master_port) == []
    labelled = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label=io.tpwarden.cluster={spec.name}"],
        capture_output=True,
        text=True,
    ).stdout.split()
    assert labelled == []
