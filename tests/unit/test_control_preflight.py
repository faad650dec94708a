"""Pre-flight on fake nodes: what a start would trip over, per node, within a deadline."""

from __future__ import annotations

from tpwarden.cluster.control.plan import plan_down, plan_up
from tpwarden.cluster.control.preflight import preflight
from tpwarden.cluster.control.results import ControlEvent, emitter
from tpwarden.cluster.launch import plan_cluster

from tests.unit.fake_nodes import FakeNodes, default_collector, good_spec

SPEC = good_spec()


def _up_plan(nodes: FakeNodes):
    """What `up` plans against what the engines hold (asked before any node is taken down)."""
    observed = {n: list(gw.containers.values()) for n, gw in nodes.engines.items()}
    return plan_up(plan_cluster(SPEC), observed, replace=True)


def _run(nodes: FakeNodes, timeout_s: float = 5.0):
    events: list[ControlEvent] = []
    report = preflight(SPEC, nodes, _up_plan(nodes), emitter(events.append), timeout_s)
    return report, events


def test_healthy_nodes_pass_and_every_check_is_asked() -> None:
    nodes = FakeNodes(SPEC)
    report, events = _run(nodes)
    assert report.ok and report.problems == ()
    assert [(e.kind, e.message) for e in events] == [("preflight", "checking 4 node(s)")]
    asked = {(n, a[0]) for n, a, _ in nodes.collector_calls}
    assert {(n.name, "paths") for n in SPEC.nodes} <= asked
    assert {(n.name, "cap") for n in SPEC.nodes} <= asked  # the inventory caps at 2000 MHz
    ports = sorted(a for n, a, _ in nodes.collector_calls if a[0] == "ports")
    assert ports == [
        ("ports", "--host", "127.0.0.1", "8000"),
        ("ports", "--host", "192.168.100.11", "29501"),
    ]  # the head's only, each where it will be bound
    assert all(sudo for _, a, sudo in nodes.collector_calls if a[0] == "cap")


def test_a_node_missing_the_image_says_how_to_fix_it() -> None:
    nodes = FakeNodes(SPEC)
    nodes.engines["node3"].images.clear()
    report, _ = _run(nodes)
    assert not report.ok
    assert report.problems == (
        f"node3: image {SPEC.serving.image} is not present (docker pull/load it on the node first)",
    )


def test_missing_paths_busy_ports_and_gpu_problems_are_all_reported() -> None:
    nodes = FakeNodes(SPEC)

    def collect(node, args, sudo):
        doc = default_collector(node, args, sudo)
        if args[0] == "paths" and node.name == "node2":
            doc["paths"][SPEC.serving.drafter.path] = {"exists": False}
        if args[0] == "ports" and args[-1] == "8000":
            doc["ports"]["8000"] = {"free": False, "reason": "in use by pid 42"}
        if args[0] == "cap" and node.name == "node4":
            doc = {"ok": False, "action": "cap", "error": "not root", "nvml": {}, "gpus": []}
        return doc

    nodes.collect = collect
    report, _ = _run(nodes)
    assert report.problems == (
        "node1: port 127.0.0.1:8000 is in use by pid 42",
        f"node2: {SPEC.serving.drafter.path} does not exist",
        "node4: cap: not root",
        "node4: no GPU visible (None)",
    )


def test_an_unreachable_node_is_a_problem_and_a_frozen_one_costs_only_the_deadline() -> None:
    nodes = FakeNodes(SPEC)
    nodes.down.add("node2")
    nodes.frozen.add("node4")
    report, _ = _run(nodes, timeout_s=0.3)
    nodes.thaw()
    assert report.problems == (
        "node2: node2: unreachable: connection refused",
        "node4: node4: unreachable: no answer within 0.3 s",
    )


def test_only_nodes_that_start_a_container_are_checked() -> None:
    nodes = FakeNodes.running(SPEC)
    observed = {n.name: nodes.docker(n).list_tpwarden(SPEC.name) for n in SPEC.nodes}
    report = preflight(SPEC, nodes, plan_down(SPEC.name, observed), emitter(None))
    assert report.ok and nodes.collector_calls == []


def test_a_head_being_replaced_does_not_count_its_own_ports_as_busy() -> None:
    nodes = FakeNodes(SPEC)
    nodes.run_all(state="exited")
    report, _ = _run(nodes)
    assert report.ok
    assert not [a for _, a, _ in nodes.collector_calls if a[0] == "ports"]
