"""`tpwarden status` gathered on fake nodes and a fake server: a node that fails is a row that
says why, never a stack trace; time comes from the injected clock."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from tpwarden.cluster.control.controller import Controller
from tpwarden.cluster.control.status_model import Verdict
from tpwarden.cluster.errors import CommandFailed, DockerError

from tests.unit.fake_nodes import FakeNodes, FixedClock, default_collector, good_spec
from tests.unit.fake_server import FakeServer

SPEC = good_spec()


@pytest.fixture
def fake(monkeypatch) -> FakeNodes:
    monkeypatch.setenv("TPWARDEN_API_KEY", "sk-test")
    return FakeNodes.running(SPEC)


def _status(tmp_path: Path, nodes: FakeNodes, server: FakeServer, **kw):
    clock = FixedClock()
    clock.advance(3600)  # an hour after the containers started
    with Controller(
        SPEC, state_dir=tmp_path, nodes=nodes, clock=clock, http=server.client()
    ) as ctl:
        return ctl.status(**kw)


def test_a_healthy_cluster(tmp_path, fake) -> None:
    st = _status(tmp_path, fake, FakeServer())
    assert st.verdict is Verdict.HEALTHY and st.config_hash == SPEC.config_hash()
    assert [(n.node, n.reachable, n.state, n.drift) for n in st.nodes] == [
        (f"node{i}", True, "running", False) for i in range(1, 5)
    ]
    assert {n.uptime_s for n in st.nodes} == {3600.0}  # the injected clock ages them
    assert all(n.gpus and n.gpu_reason is None for n in st.nodes)
    s = st.server
    assert (s.health_status, s.model, s.max_model_len, s.probe_ok) == (200, "glm", 1048576, True)
    assert (s.requests_running, s.requests_waiting, s.kv_cache_usage_pct) == (2, 1, 25.0)
    assert s.drafter_k == 3


def test_an_unreachable_node_is_a_row_that_says_why(tmp_path, fake) -> None:
    fake.down.add("node3")
    st = _status(tmp_path, fake, FakeServer())
    row = st.nodes[2]
    assert (row.node, row.role, row.reachable, row.reason) == (
        "node3",
        "worker",
        False,
        "connection refused",
    )
    assert st.verdict is Verdict.DEGRADED and any("node3" in n for n in st.notes)


def test_a_docker_error_means_reachable_but_no_container_reading(tmp_path, fake) -> None:
    def broken(cluster=None):
        raise DockerError("node2: list containers: engine restarting")

    fake.engines["node2"].list_tpwarden = broken
    row = _status(tmp_path, fake, FakeServer()).nodes[1]
    assert row.reachable and row.reason == "node2: list containers: engine restarting"


def test_a_frozen_node_costs_the_timeout_not_the_command(tmp_path, fake) -> None:
    fake.frozen.add("node4")
    t0 = time.monotonic()
    st = _status(tmp_path, fake, FakeServer(), timeout_s=0.5)
    fake.thaw()
    assert time.monotonic() - t0 < 3
    assert not st.nodes[3].reachable and "no answer within 0.5 s" in st.nodes[3].reason


def test_a_failed_gpu_reading_is_a_reason_on_a_reachable_node(tmp_path, fake) -> None:
    def collect(node, args, sudo):
        if node.name == "node2":
            raise CommandFailed("node2", ["collector", *args], 1, "python3: not found")
        doc = default_collector(node, args, sudo)
        if node.name == "node3":
            doc["nvml"] = {"available": False, "reason": "driver not loaded"}
        return doc

    fake.collect = collect
    st = _status(tmp_path, fake, FakeServer())
    assert st.nodes[1].reachable and "python3: not found" in st.nodes[1].gpu_reason
    assert st.nodes[2].gpu_reason == "driver not loaded"


def test_without_gpus_the_collector_is_not_run(tmp_path, fake) -> None:
    _status(tmp_path, fake, FakeServer(), with_gpus=False)
    assert fake.collector_calls == []


def test_a_server_that_does_not_answer(tmp_path, fake) -> None:
    st = _status(tmp_path, fake, FakeServer(up=False))
    assert st.server.health_status is None and "ConnectError" in st.server.health_error
    assert st.server.probe_error == "server not answering"
    assert st.verdict is Verdict.BOOTING


def test_a_hung_engine(tmp_path, fake) -> None:
    st = _status(tmp_path, fake, FakeServer(hung=True))
    assert st.server.health_status == 200 and not st.server.probe_ok
    assert st.verdict is Verdict.HUNG


def test_nothing_running_is_down(tmp_path, fake) -> None:
    for gw in fake.engines.values():
        gw.containers.clear()
    st = _status(tmp_path, fake, FakeServer(up=False))
    assert st.verdict is Verdict.DOWN and all(n.state is None for n in st.nodes)
