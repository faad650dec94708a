"""The nodes connector's fan-out: parallel, bounded by a deadline, errors as values; the
diagnostic container it asks a node's engine for (issue 32)."""

from __future__ import annotations

import json
import platform
import threading
import time

from tpwarden.cluster.containers.info import ContainerInfo
from tpwarden.cluster.containers.job import OneShot, OneShotResult
from tpwarden.cluster.control.nodes import DIAG_PYSPY, NodeConnector, fan_out
from tpwarden.cluster.errors import NodeUnreachable, TpwardenError
from tpwarden.cluster.labels import LABEL_CLUSTER, LABEL_COMPONENT, LABEL_NODE
from tpwarden.cluster.node_zipapp import COLLECTOR_FILE

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


class _Engine:
    """A node's Docker gateway as `collector_beside` uses it: the engine's machine, one job."""

    def __init__(self, arch: str) -> None:
        self.arch, self.jobs = arch, []

    def architecture(self) -> str:
        return self.arch

    def close(self) -> None:
        pass

    def run_once(self, job):
        self.jobs.append(job)
        return OneShotResult(0, json.dumps({"ok": True, "dossier": {"findings": []}}), "")


def _beside(arch: str) -> tuple[dict, OneShot]:
    spec = good_spec()
    node = spec.node("node3")
    rank = ContainerInfo(
        node="node3", id="c0ffee" * 10, name="lab-vllm-node3", image="vllm/custom:1",
        state="paused", labels={LABEL_CLUSTER: spec.name}, pid=4242,
    )  # fmt: skip
    connector, engine = NodeConnector(spec.ssh), _Engine(arch)
    connector._docker[node.name] = engine  # type: ignore[assignment]
    try:
        doc = connector.collector_beside(node, rank, ["dossier", "--pid", "1"], timeout=5)
    finally:
        connector.close()
    [job] = engine.jobs
    return doc, job


def test_a_diagnostic_container_joins_the_ranks_pid_namespace_with_py_spy() -> None:
    doc, job = _beside(platform.machine())
    assert (job.image, job.pid_of, job.cap_add, job.user) == (
        "vllm/custom:1", "c0ffee" * 10, ("SYS_PTRACE",), "0",
    )  # fmt: skip
    assert job.argv == ("python3", f"/{COLLECTOR_FILE}", "dossier", "--pid", "1")
    assert set(job.files) == {COLLECTOR_FILE, DIAG_PYSPY} and job.executable == {DIAG_PYSPY}
    assert job.files[DIAG_PYSPY][:4] == b"\x7fELF"  # this host's py-spy binary
    assert job.labels[LABEL_COMPONENT] == "diagnostic" and job.labels[LABEL_NODE] == "node3"
    assert doc["dossier"]["findings"] == []


def test_no_py_spy_goes_to_an_engine_of_another_machine() -> None:
    other = "aarch64" if platform.machine() != "aarch64" else "x86_64"
    doc, job = _beside(other)
    assert DIAG_PYSPY not in job.files
    assert doc["dossier"]["findings"] == [
        f"py-spy: this host's is for {platform.machine()}, the node is {other} (no stacks)"
    ]
