"""Following the boot on fake nodes: ready when the probe answers, failed on a fatal log line,
an exited rank or the deadline; the watchdog's progress read from the log so far."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from tpwarden.cluster.boot.phase import BootPhase
from tpwarden.cluster.control.boot import dead_containers
from tpwarden.cluster.control.controller import Controller
from tpwarden.cluster.errors import NodeUnreachable

from tests.unit.fake_nodes import FakeNodes, FixedClock, good_spec
from tests.unit.fake_server import FakeServer

SPEC = good_spec()
HEAD = "tpwarden-vllm-node1"
STARTING = ["INFO 01-01 00:00:00 [api_server.py:1] vLLM API server version 0.33.0"]
OOM = [
    "ERROR 01-01 00:00:01 [core.py:1] EngineCore failed to start.",
    "Traceback (most recent call last):",
    '  File "x.py", line 1, in <module>',
    "torch.OutOfMemoryError: CUDA out of memory.",
]


@pytest.fixture
def fake(monkeypatch) -> FakeNodes:
    monkeypatch.setenv("TPWARDEN_API_KEY", "sk-test")
    return FakeNodes.running(SPEC)


def _ctl(tmp_path: Path, nodes: FakeNodes, server: FakeServer, events=None) -> Controller:
    return Controller(
        SPEC,
        state_dir=tmp_path,
        nodes=nodes,
        clock=FixedClock(),
        http=server.client(),
        on_event=events.append if events is not None else None,
    )


def test_ready_when_the_probe_answers_and_the_boot_is_recorded(tmp_path, fake) -> None:
    fake.engines["node1"].log_lines[HEAD] = STARTING
    events = []
    with _ctl(tmp_path, fake, FakeServer(), events) as ctl:
        boot = ctl.follow_boot(timeout_s=10, poll_s=0.05)
    assert boot.ready and boot.reason is None and boot.progress.phase is BootPhase.READY
    assert boot.elapsed_s == 0.0  # the injected clock did not move
    assert events[-1].kind == "ready" and events[-1].node == "node1"
    assert fake.streams_closed() == [True]  # the head's log follower is closed
    (record,) = [json.loads(x) for x in (tmp_path / "boots.jsonl").read_text().splitlines()]
    assert record["config_hash"] == SPEC.config_hash()


def test_a_fatal_log_line_fails_the_boot_with_its_root_cause(tmp_path, fake) -> None:
    fake.engines["node1"].log_lines[HEAD] = STARTING + OOM
    events = []
    with _ctl(tmp_path, fake, FakeServer(up=False), events) as ctl:
        boot = ctl.follow_boot(timeout_s=10, poll_s=0.05)
    assert not boot.ready and boot.reason.startswith("out of memory")
    assert "EngineCore failed to start." in boot.last_lines["node1"]  # what the report shows
    assert events[-1].kind == "failed"


def test_an_exited_rank_fails_the_boot(tmp_path, fake) -> None:
    gw = fake.engines["node3"]
    gw.containers["tpwarden-vllm-node3"] = replace(
        gw.containers["tpwarden-vllm-node3"], state="exited", exit_code=137
    )
    with _ctl(tmp_path, fake, FakeServer(up=False)) as ctl:
        boot = ctl.follow_boot(timeout_s=10, poll_s=0.05)
    assert not boot.ready and "node3: container exited (137)" in boot.reason


def test_a_boot_that_never_answers_fails_at_the_deadline(tmp_path, fake) -> None:
    with _ctl(tmp_path, fake, FakeServer(up=False)) as ctl:
        boot = ctl.follow_boot(timeout_s=0.3, poll_s=0.05)
    assert not boot.ready and boot.reason == "not answering after 0.3 s"


def test_dead_containers_counts_only_nodes_that_answered(fake) -> None:
    observed = {n: list(gw.containers.values()) for n, gw in fake.engines.items()}
    assert dead_containers(observed) == []
    observed["node2"] = []
    observed["node3"] = [replace(observed["node3"][0], state="dead", exit_code=1)]
    observed["node4"] = NodeUnreachable("node4", "timeout")
    assert dead_containers(observed) == ["node2: container gone", "node3: container exited (1)"]


def test_boot_progress_reads_the_head_log_so_far(tmp_path, fake) -> None:
    fake.engines["node1"].log_lines[HEAD] = STARTING
    with _ctl(tmp_path, fake, FakeServer()) as ctl:
        progress = ctl.boot_progress()
        assert progress is not None and not progress.failed
        assert ctl.head_container().name == HEAD
        gw = fake.engines["node1"]
        gw.containers[HEAD] = replace(gw.containers[HEAD], state="exited", exit_code=1)
        progress = ctl.boot_progress()
        assert progress.failed and "head container exited (1)" in progress.failure_text
        gw.containers.clear()
        assert ctl.boot_progress() is None and ctl.head_container() is None


def test_up_waits_for_ready_and_returns_the_boot(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("TPWARDEN_API_KEY", "sk-test")
    nodes = FakeNodes(SPEC)
    nodes.engines["node1"].log_lines[HEAD] = STARTING
    with _ctl(tmp_path, nodes, FakeServer()) as ctl:
        result = ctl.up(timeout_s=10)
    assert result.ok and result.boot is not None and result.boot.ready
    assert [a[0] for a in nodes.actions] == ["start"] * 4
