"""A fake `tpwarden.cluster.control.controller.Controller`, beside `FakeNodes` (fake_nodes.py).

What the CLI, the rollout's ports, the watchdog's actuator and its restart job read of a
Controller, scripted: the plans of a 4-node cluster, their outcomes (`fail_node` fails one), a
status `verdict`, boot progress, the head container's start, /metrics, last log lines and a
head `session`. Every call lands in `calls` (the method's name), in order: code that must stop
before cluster control is checked by what is (not) there.

Code under test that builds its own Controller gets `FakeController.factory(...)`: a class whose
instances are kept in `made` (and which shares the scripted knobs set on it), injected where the
code takes a controller factory.
"""

from __future__ import annotations

from datetime import datetime
from types import SimpleNamespace
from typing import Any, ClassVar

from tpwarden.cluster.control.plan import Action, ControlPlan, NodeStep
from tpwarden.cluster.control.results import ApplyResult, NodeOutcome
from tpwarden.cluster.control.status_model import ClusterStatus, NodeStatus, ServerStatus, Verdict
from tpwarden.cluster.errors import ProbeError

CLUSTER, CONFIG_HASH = "glm", "1f2661cca5ba"
NODES = tuple(f"node{i}" for i in range(1, 5))


def four_node_plan(refused: bool = False, changes: bool = True) -> ControlPlan:
    """node1 first, then the three workers; `refused`: node2 runs another config."""
    action = Action.START if changes else Action.KEEP
    steps = tuple(NodeStep(n, action, "not running") for n in NODES)
    return ControlPlan(cluster=CLUSTER, config_hash=CONFIG_HASH, steps=steps,
                       waves=((NODES[0],), NODES[1:]), drift={"node2": "0000"} if refused else {},
                       refused=refused)  # fmt: skip


class FakeController:
    # Scripted answers (class level, so a factory's class carries them to the instances).
    refused: ClassVar[bool] = False  # plan_up() refuses (drift) unless replace=True
    fail_node: ClassVar[str | None] = None  # this node's outcome fails
    verdict: ClassVar[Verdict] = Verdict.HEALTHY
    restart_error: ClassVar[Exception | None] = None  # restart() raises it
    result: ClassVar[Any] = None  # restart()'s answer; None: the applied plan's outcomes
    head: ClassVar[Any] = None  # what session() hands out
    made: ClassVar[list[FakeController]] = []  # instances, for a factory() class

    def __init__(self, spec: Any = None, *args: Any, **kw: Any) -> None:
        self.spec, self.args, self.kw = spec, args, kw
        self.calls: list[str] = []
        self.restarts: list[dict[str, Any]] = []  # restart()'s arguments, `why` included
        self.progress: Any = None  # boot_progress()
        self.dead: list[str] = []  # dead_containers()
        self.page: tuple[int, str] | ProbeError = (200, "")  # metrics_page()
        self.started_at: datetime | None = None  # the head container's start
        self.log_lines: dict[str, str] = {}  # last_log_lines()
        self.closed = False
        type(self).made.append(self)

    @classmethod
    def factory(cls, **knobs: Any) -> type[FakeController]:
        """A class of its own (knobs set on it, its own `made`), to inject for a Controller."""
        return type("FakeControllerFactory", (cls,), {"made": [], **knobs})

    def __enter__(self) -> FakeController:
        return self

    def __exit__(self, *exc: object) -> None:
        self.closed = True

    def close(self) -> None:
        self.closed = True

    # -- plans and their application ----------------------------------------------------------
    def plan_up(self, replace: bool = False) -> ControlPlan:
        self.calls.append("plan_up")
        return four_node_plan(refused=self.refused and not replace)

    def plan_down(self) -> ControlPlan:
        self.calls.append("plan_down")
        return four_node_plan()

    def plan_restart(self) -> ControlPlan:
        self.calls.append("plan_restart")
        return four_node_plan()

    def _apply(self, plan: ControlPlan) -> ApplyResult:
        outcomes = tuple(
            NodeOutcome(s.node, s.node != self.fail_node, "ok" if s.node != self.fail_node
                        else "docker: 500 Server Error") for s in plan.steps
        )  # fmt: skip
        return ApplyResult(plan, outcomes)

    def up(self, replace: bool = False, wait_ready: bool = True, timeout_s: float = 0,
           plan: ControlPlan | None = None) -> ApplyResult:  # fmt: skip
        self.calls.append("up")
        return self._apply(plan or four_node_plan())

    def down(self, plan: ControlPlan | None = None) -> ApplyResult:
        self.calls.append("down")
        return self._apply(plan or four_node_plan())

    def restart(self, why: str, **kw: Any) -> Any:
        self.calls.append("restart")
        self.restarts.append({"why": why, **kw})
        if self.restart_error is not None:
            raise self.restart_error
        return self.result if self.result is not None else self._apply(four_node_plan())

    # -- reads --------------------------------------------------------------------------------
    def status(self, timeout_s: float | None = None, **kw: Any) -> ClusterStatus:
        self.calls.append("status")
        nodes = tuple(
            NodeStatus(n, "head" if n == NODES[0] else "worker", True, state="running",
                       config_hash=CONFIG_HASH)
            for n in NODES
        )  # fmt: skip
        server = ServerStatus("http://h:8000", 200, probe_ok=self.verdict is Verdict.HEALTHY)
        return ClusterStatus(CLUSTER, CONFIG_HASH, self.verdict, nodes, server, 0.1)

    def boot_progress(self) -> Any:
        self.calls.append("boot_progress")
        return self.progress

    def dead_containers(self) -> list[str]:
        self.calls.append("dead_containers")
        return self.dead

    def head_container(self) -> Any:
        self.calls.append("head_container")
        return None if self.started_at is None else SimpleNamespace(started_at=self.started_at)

    def last_log_lines(self, tail: int) -> dict[str, str]:
        self.calls.append("last_log_lines")
        return self.log_lines

    def metrics_page(self, timeout_s: float = 5.0) -> tuple[int, str]:
        self.calls.append("metrics_page")
        if isinstance(self.page, ProbeError):
            raise self.page
        return self.page

    def session(self, node: Any) -> Any:
        self.calls.append("session")
        return self.head
