"""Logs and the clock cap on fake nodes: per-node results, a failing node as text."""

from __future__ import annotations

import pytest
from tpwarden.cluster.control.clocks import set_clocks
from tpwarden.cluster.control.logs import follow_logs, last_log_lines, tail_logs

from tests.unit.fake_nodes import FakeNodes, default_collector, good_spec

SPEC = good_spec()


@pytest.fixture
def fake() -> FakeNodes:
    nodes = FakeNodes(SPEC)
    nodes.run_all()
    for i in range(1, 5):
        nodes.engines[f"node{i}"].log_lines[f"tpwarden-vllm-node{i}"] = [
            f"n{i} line {j}" for j in range(5)
        ]
    return nodes


def test_tail_logs_every_node_or_one_and_a_failing_node_in_brackets(fake) -> None:
    fake.down.add("node4")
    got = tail_logs(SPEC, fake, tail=2)
    assert got["node1"] == "n1 line 3\nn1 line 4"
    assert got["node4"] == "<node4: unreachable: connection refused>"
    assert tail_logs(SPEC, fake, "node2", tail=1) == {"node2": "n2 line 4"}


def test_last_log_lines_give_the_error_as_plain_text(fake) -> None:
    fake.down.add("node2")
    got = last_log_lines(SPEC, fake, tail=1)
    assert got["node1"] == "n1 line 4" and got["node2"] == "node2: unreachable: connection refused"


def test_follow_logs_tags_each_line_with_its_node(fake) -> None:
    lines = follow_logs(SPEC, fake, tail=10)
    got = [next(lines) for _ in range(20)]  # the streams stay open, as a live container's do
    lines.close()  # closes every stream
    for i in range(1, 5):  # each node's lines in its own order, nodes interleaved
        assert [line for node, line in got if node == f"node{i}"] == [
            f"n{i} line {j}" for j in range(5)
        ]
    assert fake.streams_closed() == [True] * 4


def test_cap_is_verified_by_reading_it_back(fake) -> None:
    def collect(node, args, sudo):
        doc = default_collector(node, args, sudo)
        if node.name == "node2":
            doc["gpus"][0]["locked_clock_max_mhz"] = None  # the cap did not hold
        return doc

    fake.collect = collect
    results = {r.node: r for r in set_clocks(SPEC, fake, "cap", 2000)}
    assert results["node1"].ok and results["node1"].message == "ok"
    assert not results["node2"].ok
    assert results["node2"].message == "node2: GPU0 clock cap reads None, want 2000"
    assert {(a, sudo) for _, a, sudo in fake.collector_calls} == {(("cap", "2000"), True)}


def test_reset_reports_a_gpu_still_capped_and_show_needs_no_sudo(fake) -> None:
    def collect(node, args, sudo):
        doc = default_collector(node, args, sudo)
        if node.name == "node3":
            doc["gpus"][0]["locked_clock_max_mhz"] = 2000
        return doc

    fake.collect = collect
    results = {r.node: r for r in set_clocks(SPEC, fake, "reset")}
    assert results["node3"].message == "node3: GPU0 still capped at 2000 MHz"
    assert all(results[n].ok for n in ("node1", "node2", "node4"))
    fake.collector_calls.clear()
    set_clocks(SPEC, fake, "show")
    assert not any(sudo for *_, sudo in fake.collector_calls)


def test_an_unreachable_node_is_a_failed_clock_result(fake) -> None:
    fake.down.add("node1")
    results = {r.node: r for r in set_clocks(SPEC, fake, "show")}
    assert not results["node1"].ok and "connection refused" in results["node1"].message
    assert results["node1"].gpus == ()
