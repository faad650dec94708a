"""The control side of a dossier over fake nodes (real fan-out and deadline) (issue 32)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import Any

from tpwarden.cluster.reports.incident import capture, pyspy_candidates
from tpwarden.cluster.spec import NodeSpec

from tests.unit.fake_nodes import FakeNodes, good_spec
from tests.unit.test_incident_verdict import process


def nodes_with_pids(paused: str | None = None) -> FakeNodes:
    spec = good_spec()
    nodes = FakeNodes.running(spec)
    for i, gw in enumerate(nodes.engines.values()):
        for name, c in gw.containers.items():
            state = "paused" if gw.node == paused else c.state
            gw.containers[name] = dataclasses.replace(c, pid=1000 + i, state=state)

    def collect(node: NodeSpec, args: Sequence[str], sudo: bool) -> dict[str, Any]:
        if node.name == paused:
            proc = process("stopped-rank-T", "gloo-stopped-rank-nonblocking.txt")
        else:
            proc = process("waiting-rank-S", "gloo-allreduce-waiting-rank.txt")
        part = {"processes": [proc], "kernel": {"events": []}, "findings": []}
        return {"ok": True, "error": None, "dossier": part, "gpus": [], "nvml": {}}

    nodes.collect = collect
    return nodes


def test_a_paused_rank_is_named_from_all_four_nodes() -> None:
    nodes = nodes_with_pids(paused="node3")
    doc = capture(nodes.spec, nodes, "3 consecutive probe failures", pyspy=["/x/py-spy"])
    assert set(doc["nodes"]) == {"node1", "node2", "node3", "node4"}
    assert doc["nodes"]["node3"]["container"]["state"] == "paused"
    v = doc["verdict"]
    assert (v["suspect"], v["rank"]) == ("node3", nodes.spec.node("node3").rank)
    assert "container paused (all its processes frozen)" in v["facts"]
    assert "process 2765 (python) stopped (T)" in v["facts"]
    [(_, args, sudo)] = [c for c in nodes.collector_calls if c[0] == "node3"]
    assert sudo is True and args[:3] == ("dossier", "--pid", "1002")
    assert args[-2:] == ("--pyspy", "/x/py-spy")


def test_a_killed_rank_has_no_container_and_no_collector_call() -> None:
    nodes = nodes_with_pids()
    nodes.engines["node3"].containers.clear()
    doc = capture(nodes.spec, nodes, "r")
    assert doc["nodes"]["node3"]["container"] is None
    assert "node3" not in [c[0] for c in nodes.collector_calls]
    assert doc["verdict"]["suspect"] == "node3"
    assert doc["verdict"]["facts"][0] == "no serving container"


def test_a_frozen_node_is_a_finding_within_the_deadline() -> None:
    nodes = nodes_with_pids(paused="node3")
    nodes.frozen.add("node4")
    try:
        started = time.monotonic()
        doc = capture(nodes.spec, nodes, "r", timeout_s=1.0)
        took = time.monotonic() - started
    finally:
        nodes.thaw()
    assert took < 2.0
    assert doc["nodes"]["node4"]["error"].endswith("no answer within 1 s")
    assert doc["verdict"]["suspect"] == "node3"  # stopped (decisive) outweighs silent
    assert any(f["node"] == "node4" for f in doc["verdict"]["findings"])


def test_an_unreachable_node_and_a_failing_collector() -> None:
    nodes = nodes_with_pids()
    nodes.down.add("node2")

    def broken(node: NodeSpec, args: Sequence[str], sudo: bool) -> dict[str, Any]:
        return {"ok": False, "error": "dossier: PermissionError: /proc", "gpus": []}

    nodes.collect = broken
    doc = capture(nodes.spec, nodes, "r")
    assert "connection refused" in doc["nodes"]["node2"]["error"]
    assert doc["nodes"]["node1"]["collect_error"] == "dossier: PermissionError: /proc"
    assert doc["verdict"]["suspect"] == "node2"


def test_pyspy_candidates() -> None:
    assert pyspy_candidates({}) == ["/opt/tpwarden/venv/bin/py-spy"]
    assert pyspy_candidates({"TPWARDEN_PYSPY": "/p"})[0] == "/p"


def test_secrets_in_a_dumped_command_line_are_hidden() -> None:
    """py-spy prints each process's command line; a key passed by hand on a serving argv must
    not reach the stored, shown and alerted dossier."""
    nodes = nodes_with_pids()
    collect = nodes.collect

    def with_key(node: NodeSpec, args: Sequence[str], sudo: bool) -> dict[str, Any]:
        out = collect(node, args, sudo)
        stack = out["dossier"]["processes"][0]["pyspy"]
        stack["command"] = "vllm serve /m --api-key sk-live-0123456789abcdef --port 8000"
        return out

    nodes.collect = with_key
    doc = capture(nodes.spec, nodes, "r")
    command = doc["nodes"]["node2"]["collected"]["processes"][0]["pyspy"]["command"]
    assert command == "vllm serve /m --api-key <redacted> --port 8000"
    assert "sk-live" not in str(doc)
