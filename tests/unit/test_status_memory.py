"""`tpwarden status` memory: the collector's reading, NodeStatus.memory, the cell and --json.

GB10's GPU has no memory of its own (NVML answers Not Supported; the lab's NVML stand-in does
the same), so status shows the node's unified memory there, and the GPU's where NVML has it.
"""

from __future__ import annotations

import json
import subprocess
import sys

from tpwarden.cluster.control.status_model import (
    ClusterStatus,
    NodeStatus,
    ServerStatus,
    Verdict,
    node_memory,
)
from tpwarden.cluster.node_zipapp import COLLECTOR, build_node_zipapp
from tpwarden.cluster.reports.status_view import memory_cell
from tpwarden.node.collector import main, node_memory_json
from tpwarden.node.memory import NodeMemory

GIB = 1024**3
GB10_GPU = {
    "index": 0,
    "memory_used_mib": None,
    "memory_total_mib": None,
    "missing": {"memory_total_mib": "NVML: Not Supported; unified memory (GB10)"},
}
DISCRETE_GPU = {"index": 0, "memory_used_mib": 32768.0, "memory_total_mib": 81920.0, "missing": {}}


def test_collector_show_reports_the_injected_memory(capsys):
    reading = NodeMemory(128 * GIB, 37 * GIB, "psutil")
    main(["--nvml-lib", "/nonexistent/libnvidia-ml.so.1", "show"], read_memory=lambda: reading)
    doc = json.loads(capsys.readouterr().out)
    assert doc["memory"] == {
        "total_bytes": 128 * GIB,
        "available_bytes": 37 * GIB,
        "used_bytes": 91 * GIB,
        "source": "psutil",
    }


def test_unreadable_memory_is_an_error_in_the_json_not_a_failure():
    def broken() -> NodeMemory:
        raise ValueError("/proc/meminfo has no MemTotal/MemAvailable")

    assert node_memory_json(broken) == {
        "error": "ValueError: /proc/meminfo has no MemTotal/MemAvailable"
    }


def test_zipapp_carries_memory_and_reads_it_on_a_bare_python3(tmp_path):
    app = build_node_zipapp(COLLECTOR, tmp_path / "c.pyz").path
    # -I -S: no site-packages, so no psutil: the /proc/meminfo path the nodes' python3 takes
    out = subprocess.run(
        [sys.executable, "-I", "-S", str(app), "--nvml-lib", "/nonexistent/nvml.so", "show"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    doc = json.loads(out.stdout)
    mem = doc["memory"]
    assert mem["source"] == "/proc/meminfo", mem
    assert 0 < mem["available_bytes"] <= mem["total_bytes"]
    assert mem["used_bytes"] == mem["total_bytes"] - mem["available_bytes"]


def _doc(used_gib: int) -> dict:
    return {
        "memory": {
            "total_bytes": 128 * GIB,
            "available_bytes": (128 - used_gib) * GIB,
            "used_bytes": used_gib * GIB,
            "source": "/proc/meminfo",
        }
    }


def test_gb10_memory_is_unified_discrete_is_not():
    gb10 = node_memory(_doc(91), [GB10_GPU])
    assert gb10 == {
        "total_bytes": 128 * GIB,
        "used_bytes": 91 * GIB,
        "available_bytes": 37 * GIB,
        "unified": True,
    }
    assert node_memory(_doc(91), [DISCRETE_GPU])["unified"] is False
    assert node_memory(_doc(91), [])["unified"] is False  # no GPU seen: nothing says unified
    assert node_memory({"memory": {"error": "x"}}, [GB10_GPU]) is None


def _node(memory, gpus) -> NodeStatus:
    return NodeStatus("node1", "head", True, state="running", gpus=tuple(gpus), memory=memory)


def test_memory_cell():
    assert memory_cell(_node(node_memory(_doc(91), [GB10_GPU]), [GB10_GPU])) == "71%uni"
    # discrete: the GPU's own memory as NVML reports it, not the node's
    assert memory_cell(_node(node_memory(_doc(91), [DISCRETE_GPU]), [DISCRETE_GPU])) == "40%gpu"
    assert memory_cell(_node(node_memory(_doc(45), []), [])) == "35%"
    assert memory_cell(_node(None, [GB10_GPU])) == "-"


def test_json_has_a_memory_object_per_node():
    nodes = (
        _node(node_memory(_doc(91), [GB10_GPU]), [GB10_GPU]),
        NodeStatus("node2", "worker", False, reason="unreachable"),
    )
    st = ClusterStatus("glm", "h", Verdict.DEGRADED, nodes, ServerStatus("http://h:8000"), 1.0)
    out = json.loads(json.dumps(st.to_json()))
    assert out["nodes"][0]["memory"] == {
        "total_bytes": 128 * GIB,
        "used_bytes": 91 * GIB,
        "available_bytes": 37 * GIB,
        "unified": True,
    }
    assert out["nodes"][1]["memory"] is None
