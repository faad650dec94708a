"""Logs and the clock cap on fake nodes: per-node results, a failing node as text."""

from __future__ import annotations

import pytest
from tpwarden.cluster.control.clocks import set_clocks
from tpwarden.cluster.control.logs import follow_logs, last_log_lines, tail_logs
from tpwarden.node.clockcap import LockAnswer, make_record

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


def _refused(doc: dict, answer: str, code: int, message: str) -> dict:
    """What the collector reports when the driver refuses the lock call (node/collector.py)."""
    record = make_record(
        doc["action"], 2000, [LockAnswer(index=0, answer=answer, code=code, message=message)], 0.0
    )
    doc["clock_cap"]["record"] = record
    doc["gpus"][0]["locked_clock_max_mhz"] = None
    doc["ok"] = False
    doc["error"] = f"cannot lock GPU clocks on GPU 0: NVML answered {answer} ({message})"
    return doc


def test_cap_is_proven_by_the_lock_calls_answer_and_a_refusal_names_it(fake) -> None:
    # Replaces "verified by reading it back": NVML has no read-back of a lock.
    def collect(node, args, sudo):
        doc = default_collector(node, args, sudo)
        if node.name == "node2":
            return _refused(doc, "NOT_SUPPORTED", 3, "Not Supported")
        return doc

    fake.collect = collect
    results = {r.node: r for r in set_clocks(SPEC, fake, "cap", 2000)}
    assert results["node1"].ok
    assert results["node1"].message == (
        "2000 MHz set at 2027-01-15T08:00:00Z; NVML has no read-back"
    )
    assert results["node1"].gpus[0]["clock_cap_state"] == "set"
    assert not results["node2"].ok
    assert results["node2"].message == (
        "node2: cap: cannot lock GPU clocks on GPU 0: NVML answered NOT_SUPPORTED (Not Supported)"
    )
    assert results["node2"].gpus[0]["clock_cap_state"] == "refused"
    assert {(a, sudo) for _, a, sudo in fake.collector_calls} == {(("cap", "2000"), True)}


def test_show_fails_a_refused_record_and_a_violated_cap_not_a_missing_record(fake) -> None:
    def collect(node, args, sudo):
        doc = default_collector(node, ["cap", "2000"], sudo)  # what the node has recorded
        doc["action"] = "show"
        if node.name == "node1":
            doc["gpus"][0]["sm_clock_mhz"] = 2051  # 1 MHz past the tolerance, under load
        if node.name == "node2":
            doc["gpus"][0]["sm_clock_mhz"] = 2050  # within it
        if node.name == "node3":
            _refused(doc, "NO_PERMISSION", 4, "Insufficient Permissions")
            doc["ok"], doc["error"] = True, None  # `show` itself worked
        if node.name == "node4":
            doc["clock_cap"] = {"record": None, "reason": "no lock call recorded since boot"}
        return doc

    fake.collect = collect
    results = {r.node: r for r in set_clocks(SPEC, fake, "show")}
    assert not results["node1"].ok
    assert results["node1"].message == (
        "node1: clock cap violated: GPU0 SM clock 2051 MHz above the 2000 MHz cap "
        "(+50 MHz tolerance)"
    )
    assert results["node1"].gpus[0]["clock_cap_violation"]
    assert results["node2"].ok and results["node2"].gpus[0]["clock_cap_violation"] is None
    assert not results["node3"].ok
    assert "NVML answered NO_PERMISSION (Insufficient Permissions)" in results["node3"].message
    assert results["node4"].ok  # no record: said, not failed
    assert results["node4"].message == (
        "no cap recorded (no lock call recorded since boot); NVML has no read-back"
    )
    assert not any(sudo for *_, sudo in fake.collector_calls)


def test_reset_is_recorded_and_a_refused_reset_fails(fake) -> None:
    def collect(node, args, sudo):
        doc = default_collector(node, args, sudo)
        if node.name == "node3":
            doc["ok"] = False
            doc["error"] = "cannot reset GPU clocks on GPU 0: NVML answered NO_PERMISSION (x)"
        return doc

    fake.collect = collect
    results = {r.node: r for r in set_clocks(SPEC, fake, "reset")}
    assert results["node1"].message == (
        "clocks reset at 2027-01-15T08:00:00Z; NVML has no read-back"
    )
    assert not results["node3"].ok and "NO_PERMISSION" in results["node3"].message
    assert all(results[n].ok for n in ("node1", "node2", "node4"))
    assert all(sudo for *_, sudo in fake.collector_calls)


def test_an_unreachable_node_is_a_failed_clock_result(fake) -> None:
    fake.down.add("node1")
    results = {r.node: r for r in set_clocks(SPEC, fake, "show")}
    assert not results["node1"].ok and "connection refused" in results["node1"].message
    assert results["node1"].gpus == ()
