"""A dossier where the nodes' /proc does not show the ranks' processes (issue 32): each node's
collector says so (`missing_roots`), and the processes and stacks come from a diagnostic
container in the rank's PID namespace, beside the host's kernel log, over fake nodes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tpwarden.cluster.containers.info import ContainerInfo
from tpwarden.cluster.errors import DockerError
from tpwarden.cluster.reports.incident import capture
from tpwarden.cluster.spec import NodeSpec

from tests.unit.test_incident_capture import nodes_with_pids
from tests.unit.test_incident_verdict import process

XID = {"kind": "xid", "xid": 79, "pid": None, "message": "GPU has fallen off the bus"}


def host_blind(nodes: Any, xid_on: str | None = None) -> None:
    """Every node's collector runs in another PID space than its engine: no process of the
    container, the kernel log still its host's."""

    def collect(node: NodeSpec, args: Sequence[str], sudo: bool) -> dict[str, Any]:
        root = int(args[args.index("--pid") + 1])
        part = {
            "processes": [],
            "missing_roots": [root],
            "kernel": {"events": [XID] if node.name == xid_on else []},
            "findings": [f"process {root} not in this node's /proc (exited, or another PID space)"],
        }
        return {"ok": True, "error": None, "dossier": part, "gpus": [], "nvml": {}}

    nodes.collect = collect


def beside(node: NodeSpec, container: ContainerInfo, args: Sequence[str]) -> dict[str, Any]:
    """What the diagnostic container's collector reads: PID 1 of the rank's own namespace."""
    if "--frozen" in args:
        proc = process("stopped-rank-T", "gloo-stopped-rank-nonblocking.txt")
    else:
        proc = process("waiting-rank-S", "gloo-allreduce-waiting-rank.txt")
    proc["pid"] = 1
    proc["pyspy"]["command"] = "vllm serve /m --api-key sk-live-0123456789abcdef"
    part = {"processes": [proc], "missing_roots": [], "kernel": {"events": []}, "findings": []}
    return {"ok": True, "error": None, "dossier": part, "gpus": [], "nvml": {}}


def test_a_paused_rank_and_the_others_stacks_come_from_diagnostic_containers() -> None:
    nodes = nodes_with_pids(paused="node3")
    host_blind(nodes, xid_on="node3")
    nodes.beside = beside
    doc = capture(nodes.spec, nodes, "3 consecutive probe failures")
    calls = {name: (cid, args) for name, cid, args, _ in nodes.beside_calls}
    assert set(calls) == {"node1", "node2", "node3", "node4"}
    for name, (cid, args) in calls.items():
        assert cid == nodes.engines[name].containers[next(iter(nodes.engines[name].containers))].id
        assert args[:3] == ("dossier", "--pid", "1") and "--no-kernel-log" in args
        assert ("--frozen" in args) is (name == "node3")  # the engine says node3 is paused
    node3 = doc["nodes"]["node3"]["collected"]
    assert node3["pid_namespace"] == "container"
    assert node3["kernel"]["events"] == [XID]  # the host's kernel log is kept
    assert (
        "processes read from a diagnostic container in the rank's PID namespace"
        in (node3["findings"])
    )
    v = doc["verdict"]
    assert v["suspect"] == "node3"
    assert "process 1 in the container (python) stopped (T)" in v["facts"]
    assert any(f.startswith("Xid 79") for f in v["facts"]), v["facts"]
    assert any(f.startswith("node1, node2, node4 wait in all_reduce") for f in v["facts"]), v
    assert "sk-live" not in str(doc)  # the diagnostic container's command lines redacted too


def test_a_failed_diagnostic_container_is_a_finding_and_the_engine_still_names_the_rank() -> None:
    nodes = nodes_with_pids(paused="node3")
    host_blind(nodes)

    def broken(node: NodeSpec, container: ContainerInfo, args: Sequence[str]) -> dict[str, Any]:
        raise DockerError(f"{node.name}: exec: python3: not found")

    nodes.beside = broken
    doc = capture(nodes.spec, nodes, "r")
    node3 = doc["nodes"]["node3"]["collected"]
    assert node3["processes"] == [] and "pid_namespace" not in node3
    assert "diagnostic container: node3: exec: python3: not found" in node3["findings"]
    assert doc["verdict"]["suspect"] == "node3"
    assert "container paused (all its processes frozen)" in doc["verdict"]["facts"]


def test_no_diagnostic_container_when_the_host_sees_the_processes_or_no_time_is_left() -> None:
    nodes = nodes_with_pids(paused="node3")  # its collector answers with the processes
    nodes.beside = beside
    capture(nodes.spec, nodes, "r")
    assert nodes.beside_calls == []
    host_blind(nodes)
    doc = capture(nodes.spec, nodes, "r", timeout_s=3.5)  # 2.5 s per node: too little
    assert nodes.beside_calls == []
    assert any(
        f.startswith("diagnostic container: not run (paused, ")
        for f in doc["nodes"]["node3"]["collected"]["findings"]
    )
