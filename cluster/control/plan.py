"""Pure planning for `up` / `down`: observed containers + the launch plan -> what to do.

No I/O here: `tpwarden.cluster.control.controller` gathers the facts (containers by label on each node) and applies
the plan this module returns, so `--dry-run` is free and every decision is unit-tested.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

from tpwarden.cluster.durable import JSONObject
from tpwarden.cluster.errors import TpwardenError

if TYPE_CHECKING:
    from tpwarden.cluster.containers.info import ContainerInfo
    from tpwarden.cluster.launch import ClusterPlan, ContainerPlan


class Drift(TpwardenError):
    """Containers of another config hash are running; `up` refuses without `replace`."""

    exit_code = 3

    def __init__(self, nodes: Mapping[str, str | None], wanted: str) -> None:
        self.nodes = dict(nodes)
        self.wanted = wanted
        running = ", ".join(f"{n}={h or '?'}" for n, h in sorted(self.nodes.items()))
        super().__init__(
            f"config drift: running {running}, inventory says {wanted}; use "
            f"`tpwarden up --replace` or `tpwarden restart` to apply it"
        )


class Action(StrEnum):
    KEEP = "keep"  # same config hash, running: leave alone
    START = "start"  # nothing there: create and start
    REPLACE = "replace"  # remove what is there, then start
    REMOVE = "remove"  # remove only (down, or a stray container)


@dataclass(frozen=True)
class NodeStep:
    node: str
    action: Action
    reason: str
    remove: tuple[str, ...] = ()  # container names/ids to stop and remove first
    container: ContainerPlan | None = None  # what to start (START / REPLACE)

    def to_json(self) -> JSONObject:
        return {
            "node": self.node,
            "action": self.action.value,
            "reason": self.reason,
            "remove": list(self.remove),
            "start": self.container.to_json() if self.container is not None else None,
        }


@dataclass(frozen=True, kw_only=True)
class ControlPlan:
    """A typed plan: removals first (all nodes, in parallel), then starts in `waves`."""

    cluster: str
    config_hash: str
    steps: tuple[NodeStep, ...]
    waves: tuple[tuple[str, ...], ...] = ()
    drift: Mapping[str, str | None] = field(default_factory=dict)
    refused: bool = False

    @property
    def changes(self) -> bool:
        return any(s.action is not Action.KEEP for s in self.steps)

    def step(self, node: str) -> NodeStep:
        return next(s for s in self.steps if s.node == node)

    def to_json(self) -> JSONObject:
        return {
            "cluster": self.cluster,
            "config_hash": self.config_hash,
            "changes": self.changes,
            "refused": self.refused,
            "drift": dict(self.drift),
            "waves": [list(w) for w in self.waves],
            "steps": [s.to_json() for s in self.steps],
        }


def start_waves(cluster_plan: ClusterPlan, nodes: Sequence[str]) -> tuple[tuple[str, ...], ...]:
    """Start order. Native (mp) path: head first, then every worker together (headless ranks
    retry the head's TCPStore until it is up). Ray: the head (GCS) must be up before workers
    join, so also head first; the Ray head's `vllm serve` is exec'd after all joined."""
    wanted = set(nodes)
    heads = tuple(c.node for c in cluster_plan.containers if c.role == "head" and c.node in wanted)
    workers = tuple(
        c.node for c in cluster_plan.containers if c.role != "head" and c.node in wanted
    )
    return tuple(w for w in (heads, workers) if w)


def plan_up(
    cluster_plan: ClusterPlan,
    observed: Mapping[str, Sequence[ContainerInfo]],
    replace: bool = False,
) -> ControlPlan:
    """Decide what `up` does on each node.

    - every node runs this config hash (running) -> nothing to do;
    - any node runs another hash -> drift: refused unless `replace`;
    - otherwise (something missing, exited or paused) the whole TP group is (re)started: a
      lone rank cannot rejoin a running group, so ranks always start together.
    """
    want = cluster_plan.config_hash
    drift: dict[str, str | None] = {}
    healthy: dict[str, bool] = {}
    for c in cluster_plan.containers:
        infos = list(observed.get(c.node, ()))
        other = [i for i in infos if i.config_hash != want]
        if other:
            drift[c.node] = other[0].config_hash
        healthy[c.node] = (
            len(infos) == 1
            and infos[0].config_hash == want
            and infos[0].running
            and infos[0].name == c.name
        )
    if all(healthy.values()) and not drift:
        steps = tuple(
            NodeStep(c.node, Action.KEEP, f"running config {want}") for c in cluster_plan.containers
        )
        return ControlPlan(cluster=cluster_plan.cluster, config_hash=want, steps=steps)
    refused = bool(drift) and not replace
    steps_list = []
    for c in cluster_plan.containers:
        infos = list(observed.get(c.node, ()))
        names = tuple(i.name or i.id for i in infos)
        if not infos:
            steps_list.append(NodeStep(c.node, Action.START, "no serving container", (), c))
            continue
        if c.node in drift:
            reason = f"running config {drift[c.node]}, want {want}"
        elif healthy[c.node]:
            reason = "ranks restart together (another node needs a start)"
        else:
            states = ", ".join(sorted({i.state for i in infos}))
            reason = f"container {states}"
        steps_list.append(NodeStep(c.node, Action.REPLACE, reason, names, c))
    return ControlPlan(
        cluster=cluster_plan.cluster,
        config_hash=want,
        steps=tuple(steps_list),
        waves=start_waves(cluster_plan, [s.node for s in steps_list]),
        drift=drift,
        refused=refused,
    )


def plan_down(
    cluster: str, observed: Mapping[str, Sequence[ContainerInfo]], config_hash: str = ""
) -> ControlPlan:
    """Remove every serving container found by label; nodes with none get KEEP (no-op)."""
    steps = []
    for node, infos in observed.items():
        if infos:
            states = ", ".join(sorted({i.state for i in infos}))
            steps.append(
                NodeStep(
                    node, Action.REMOVE, f"container {states}", tuple(i.name or i.id for i in infos)
                )
            )
        else:
            steps.append(NodeStep(node, Action.KEEP, "no serving container"))
    return ControlPlan(cluster=cluster, config_hash=config_hash, steps=tuple(steps))


def plan_restart(
    cluster_plan: ClusterPlan, observed: Mapping[str, Sequence[ContainerInfo]]
) -> ControlPlan:
    """`restart` = down + up as one plan: every node is removed (if present) and started."""
    steps = []
    for c in cluster_plan.containers:
        infos = list(observed.get(c.node, ()))
        names = tuple(i.name or i.id for i in infos)
        action = Action.REPLACE if infos else Action.START
        steps.append(NodeStep(c.node, action, "restart", names, c))
    return ControlPlan(
        cluster=cluster_plan.cluster,
        config_hash=cluster_plan.config_hash,
        steps=tuple(steps),
        waves=start_waves(cluster_plan, [c.node for c in cluster_plan.containers]),
    )
