"""Pre-flight on fake nodes: what a start would trip over, per node, within a deadline."""

from __future__ import annotations

import json

import pytest
from tpwarden.cluster.control.plan import plan_down, plan_up
from tpwarden.cluster.control.preflight import preflight
from tpwarden.cluster.control.results import ControlEvent, emitter
from tpwarden.cluster.launch import plan_cluster
from tpwarden.node.clockcap import LockAnswer, make_record

from tests.unit.fake_nodes import FakeNodes, default_collector, good_spec

SPEC = good_spec()


def _up_plan(nodes: FakeNodes):
    """What `up` plans against what the engines hold (asked before any node is taken down)."""
    observed = {n: list(gw.containers.values()) for n, gw in nodes.engines.items()}
    return plan_up(plan_cluster(SPEC), observed, replace=True)


def _checks(events) -> list:
    """Events other than the per-node memory and fabric lines (every start prints those)."""
    return [e for e in events if not e.message.startswith(("memory: ", "fabric: "))]


def _run(nodes: FakeNodes, timeout_s: float = 5.0):
    events: list[ControlEvent] = []
    report = preflight(SPEC, nodes, _up_plan(nodes), emitter(events.append), timeout_s)
    return report, events


def test_healthy_nodes_pass_and_every_check_is_asked() -> None:
    nodes = FakeNodes(SPEC)
    report, events = _run(nodes)
    assert report.ok and report.problems == ()
    assert [(e.kind, e.message) for e in _checks(events)] == [("preflight", "checking 4 node(s)")]
    for n in SPEC.nodes:  # each node's memory and fabric, said once
        lines = [e.message.split(":")[0] for e in events if e.node == n.name]
        assert sorted(lines) == ["fabric", "memory"]
    # one collector run per node for the GPUs, the paths, the fabric and the memory (the
    # inventory caps at 2000 MHz; a GPU engine: the page cache dropped first, as root)
    model, drafter = SPEC.serving.model.path, SPEC.serving.drafter.path
    cap = ("--path", model, "--path", drafter, "--rdma", "--memory", "--drop-caches", "auto",
           "cap", "2000")  # fmt: skip
    for n in SPEC.nodes:
        assert [
            a for name, a, _ in nodes.collector_calls if name == n.name and a[0] != "ports"
        ] == [cap]
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


def _lock_answer(answer: str, code: int, message: str):
    """A collector whose node's driver answers the lock call with `answer` on node3."""

    def collect(node, args, sudo):
        doc = default_collector(node, args, sudo)
        if args[0] == "cap" and node.name == "node3":
            lock = LockAnswer(index=0, answer=answer, code=code, message=message)
            doc["clock_cap"]["record"] = make_record("cap", 2000, [lock], 0.0)
            doc["gpus"][0]["locked_clock_max_mhz"] = None
            doc["ok"] = False
            doc["error"] = f"cannot lock GPU clocks on GPU 0: NVML answered {answer} ({message})"
        return doc

    return collect


@pytest.mark.parametrize(
    ("answer", "code", "message"),
    [("NOT_SUPPORTED", 3, "Not Supported"), ("NO_PERMISSION", 4, "Insufficient Permissions")],
)
def test_a_refused_lock_call_refuses_with_the_drivers_answer(answer, code, message) -> None:
    nodes = FakeNodes(SPEC)
    nodes.collect = _lock_answer(answer, code, message)
    report, _ = _run(nodes)
    assert not report.ok
    assert report.problems == (
        f"node3: cap: cannot lock GPU clocks on GPU 0: NVML answered {answer} ({message})",
    )


def test_a_successful_lock_call_passes_though_nvml_reads_no_cap_back() -> None:
    # The old pre-flight refused unless NVML read `locked_clock_max_mhz == cap` back; real NVML
    # has no such getter. The lock call's SUCCESS is the proof: nothing else is asked of NVML.
    nodes = FakeNodes(SPEC)

    def collect(node, args, sudo):
        doc = default_collector(node, args, sudo)
        if args[0] == "cap":
            doc["gpus"][0].pop("locked_clock_max_mhz")
        return doc

    nodes.collect = collect
    report, events = _run(nodes)
    assert report.ok and report.facts["notices"] == ()
    assert [e.message for e in _checks(events)] == ["checking 4 node(s)"]


def test_an_unstored_record_and_a_violated_cap_are_notices_not_refusals() -> None:
    nodes = FakeNodes(SPEC)

    def collect(node, args, sudo):
        doc = default_collector(node, args, sudo)
        if args[0] == "cap" and node.name == "node1":
            doc["clock_cap"]["reason"] = "clock-cap record not stored: OSError: read-only"
        if args[0] == "cap" and node.name == "node2":
            doc["gpus"][0]["sm_clock_mhz"] = 2400
        if args[0] == "cap" and node.name == "node4":
            doc["clock_cap"] = {"record": None, "reason": "collector too old"}
        return doc

    nodes.collect = collect
    report, events = _run(nodes)
    assert report.ok and report.problems == ()
    assert report.facts["notices"] == (
        "node1: clock-cap record not stored: OSError: read-only",
        "node2: clock cap violated: GPU0 SM clock 2400 MHz above the 2000 MHz cap "
        "(+50 MHz tolerance)",
        "node4: GPU clock cap 2000 MHz not in force by the record: no cap recorded "
        "(collector too old); NVML has no read-back",
    )
    printed = sorted(e.message for e in _checks(events) if e.node)
    assert printed == [f"notice: {n}" for n in report.facts["notices"]]


def test_the_real_collector_checks_paths_beside_any_action(tmp_path, capsys) -> None:
    """`--path` on the real collector (node/collector.py): pre-flight's one run per node."""
    from tpwarden.node.collector import main

    there = tmp_path / "model"
    there.mkdir()
    missing = str(tmp_path / "drafter")
    args = ["--nvml-lib", "/nonexistent/libnvidia-ml.so.1", "--path", str(there)]
    main([*args, "--path", missing, "show"])
    doc = json.loads(capsys.readouterr().out)
    assert doc["action"] == "show" and "gpus" in doc
    assert doc["paths"][str(there)]["exists"] is True
    assert doc["paths"][missing]["exists"] is False
