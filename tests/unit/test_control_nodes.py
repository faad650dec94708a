"""The nodes connector's fan-out: parallel, bounded by a deadline, errors as values."""

from __future__ import annotations

import threading
import time

from tpwarden.cluster.control.nodes import NodeConnector, fan_out
from tpwarden.cluster.errors import NodeUnreachable, TpwardenError

from tests.unit.fake_nodes import FakeNodes, good_spec


def test_every_node_answers_in_parallel_and_errors_are_values() -> None:
    spec = good_spec()
    nodes = FakeNodes(spec)
    nodes.down.add("node3")

    # Side by side, not one after another: each call waits until all four have started (one
    # after another, the first would wait alone and break the barrier). No wall-clock bound, so
    # a loaded machine cannot fail it.
    all_started = threading.Barrier(len(spec.nodes), timeout=20)

    def work(n):
        all_started.wait()
        return nodes.docker(n).image_present(spec.serving.image)

    got = nodes.fan_out(list(spec.nodes), work, timeout=30)
    assert not all_started.broken
    assert [k for k, v in got.items() if v is True] == ["node1", "node2", "node4"]
    assert isinstance(got["node3"], NodeUnreachable) and "refused" in str(got["node3"])


def test_a_frozen_node_is_unreachable_at_the_deadline_not_a_hang() -> None:
    spec = good_spec()
    nodes = FakeNodes(spec)
    nodes.frozen.add("node2")
    t0 = time.monotonic()
    got = fan_out(list(spec.nodes), lambda n: nodes.collector(n, ["show"]), timeout=0.3)
    assert time.monotonic() - t0 < 2
    assert isinstance(got["node2"], NodeUnreachable)
    assert "no answer within 0.3 s" in str(got["node2"])
    assert all(isinstance(got[n], dict) for n in ("node1", "node3", "node4"))
    nodes.thaw()


def test_a_bug_on_one_node_is_a_tpwarden_error_for_that_node_only() -> None:
    spec = good_spec()

    def work(n):
        if n.name == "node4":
            raise KeyError("boom")
        return n.name

    got = fan_out(list(spec.nodes), work, timeout=5)
    assert isinstance(got["node4"], TpwardenError) and "KeyError" in str(got["node4"])
    assert got["node1"] == "node1"


def test_the_real_connector_connects_to_nothing_until_asked() -> None:
    connector = NodeConnector(good_spec().ssh, nvml_lib="/x/libnvidia-ml.so")
    assert connector.nvml_lib == "/x/libnvidia-ml.so"
    assert connector.fan_out([], lambda n: n) == {}
    connector.close()
