"""`tpwarden lab fault pause|unpause|kill NODE`: the node's server rank only, never a bench or
eval client running on that node; unpause touches only what is paused (no Docker: a fake)."""

from __future__ import annotations

from tpwarden.lab import faults
from tpwarden.lab.paths import LabPaths


class FakeContainer:
    def __init__(self, name: str, status: str, component: str) -> None:
        self.name, self.status, self.component = name, status, component
        self.calls: list[str] = []

    def pause(self) -> None:
        self.calls.append("pause")

    def unpause(self) -> None:
        self.calls.append("unpause")

    def kill(self) -> None:
        self.calls.append("kill")


class FakeClient:
    def __init__(self, containers: list[FakeContainer]) -> None:
        self.all = containers
        self.containers = self

    def list(self, all: bool, filters: dict) -> list[FakeContainer]:  # noqa: A002 - docker's name
        wanted = dict(label.split("=", 1) for label in filters["label"])
        return [c for c in self.all if wanted.get("io.tpwarden.component") == c.component]


def test_a_node_fault_leaves_an_eval_client_on_that_node_alone(tmp_path) -> None:
    # The eval lab test paused the head and froze the eval client running there too.
    rank = FakeContainer("lab-vllm-node1", "running", "vllm")
    client = FakeContainer("lab-eval-run", "running", "eval")
    fake = FakeClient([rank, client])
    assert faults.container_action(LabPaths(tmp_path), "node1", "pause", fake) == ["lab-vllm-node1"]
    assert rank.calls == ["pause"] and client.calls == []


def test_unpause_after_a_restart_skips_the_new_running_rank(tmp_path) -> None:
    # After the watchdog replaced the paused rank, unpause raised on the running one.
    new = FakeContainer("lab-vllm-node1", "running", "vllm")
    assert faults.container_action(LabPaths(tmp_path), "node1", "unpause", FakeClient([new])) == []
    old = FakeContainer("lab-vllm-node1", "paused", "vllm")
    assert faults.container_action(LabPaths(tmp_path), "node1", "unpause", FakeClient([old])) == [
        "lab-vllm-node1"
    ]
