"""Runs last in the tier: `down` after the head died leaves no rank, container or port behind.
Real vLLM's headless ranks keep running when the head is killed; down must stop them itself."""

from __future__ import annotations

import re
import subprocess
import time

import pytest
from tpwarden.lab import faults
from tpwarden.lab.paths import HEAD, NODE_NAMES

pytestmark = pytest.mark.engine

RANK_PROCESS = re.compile(r"vllm serve|VLLM::")


def _rank_processes() -> list[str]:
    out = subprocess.run(["ps", "-eo", "stat,args"], capture_output=True, text=True).stdout
    return [
        line
        for line in out.splitlines()[1:]
        if RANK_PROCESS.search(line) and not line.startswith("Z")
    ]


def _listening(port: int) -> list[str]:
    out = subprocess.run(["ss", "-ltnH"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if re.search(rf":{port}\b", line)]


def test_down_after_head_died_kills_every_rank(engine_server):
    spec = engine_server.spec
    with engine_server.controller(node_timeout_s=10) as ctl:
        assert len(ctl.status(timeout_s=15).nodes) == 4
        faults.container_action(engine_server.paths, HEAD, "kill")
        time.sleep(3)  # what a crashed head leaves: the headless ranks
        states = {n.node: n.state for n in ctl.status(timeout_s=15).nodes}
        assert states[HEAD] != "running"
        assert [states[n] for n in NODE_NAMES if n != HEAD] == ["running"] * 3, states
        assert len(_rank_processes()) >= 3
        result = ctl.down()
        assert all(o.ok for o in result.outcomes), result.outcomes
        assert all(not cs for cs in ctl.observe().values())
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (
        _rank_processes() or _listening(spec.serving.port) or _listening(29501)
    ):
        time.sleep(1)
    assert _rank_processes() == []
    assert _listening(spec.serving.port) == [] and _listening(29501) == []
    labelled = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label=io.tpwarden.cluster={spec.name}"],
        capture_output=True,
        text=True,
    ).stdout.split()
    assert labelled == []
