"""Cluster control: up, down, restart, status, logs, boot following and the clock cap.

`Controller` is the facade one tpwarden command holds: it plans (pure,
`tpwarden.cluster.control.plan`), checks (`preflight`), applies (`apply`),
follows the boot (`boot`), gathers status (`status`), reads logs
(`logs`) and sets clocks (`clocks`). It reaches the nodes through a `Nodes`
connector (`tpwarden.cluster.control.nodes`) and reads time from an injected wall clock, so each part
runs in unit tests against a fake. It never prints: it returns typed results
(`results`) and reports progress through an `on_event` callback.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

import httpx
from tpwarden.cluster.boot.history import BootHistory
from tpwarden.cluster.boot.progress import BootProgress
from tpwarden.cluster.containers.gateway import DockerGateway
from tpwarden.cluster.containers.info import ContainerInfo
from tpwarden.cluster.control.applied import (
    AppliedPlan,
    local_paths,
    plan_for,
    read_applied,
    write_head,
    write_local,
)
from tpwarden.cluster.control.applied import revision as applied_revision
from tpwarden.cluster.control.apply import apply_plan, resolve_secrets
from tpwarden.cluster.control.boot import BootFollower
from tpwarden.cluster.control.clocks import set_clocks
from tpwarden.cluster.control.logs import follow_logs, last_log_lines, tail_logs
from tpwarden.cluster.control.nodes import NodeConnector, Nodes, is_local
from tpwarden.cluster.control.plan import ControlPlan, Drift, plan_down, plan_restart, plan_up
from tpwarden.cluster.control.preflight import preflight
from tpwarden.cluster.control.results import (
    ApplyResult,
    BootResult,
    ClockResult,
    EventCallback,
    NodeOutcome,
    PreflightReport,
    ServerProbe,
    emitter,
)
from tpwarden.cluster.control.server import ServerEndpoint
from tpwarden.cluster.control.status import gather_status
from tpwarden.cluster.control.status_model import ClusterStatus, ServerStatus
from tpwarden.cluster.control.transport import gather_transport
from tpwarden.cluster.durable import JsonlLog, JSONObject, default_state_dir
from tpwarden.cluster.errors import TpwardenError
from tpwarden.cluster.launch import ClusterPlan, ContainerPlan, plan_cluster
from tpwarden.cluster.operator_lock import operator_identity
from tpwarden.cluster.spec import ClusterSpec, NodeSpec
from tpwarden.cluster.ssh.gateway import NodeSession, SshPool

log = logging.getLogger(__name__)
T = TypeVar("T")


class Controller:
    """Acts on one cluster. Constructing it connects to nothing; use as a context manager.

    `nodes` is the connector to the nodes (default: real SSH and Docker, `NodeConnector`);
    `clock` is wall-clock seconds (default `time.time`); `http` reaches the serving API."""

    def __init__(
        self,
        spec: ClusterSpec,
        *,
        state_dir: str | Path | None = None,
        node_timeout_s: float = 10.0,
        on_event: EventCallback | None = None,
        http: httpx.Client | None = None,
        clock: Callable[[], float] = time.time,
        nvml_lib: str | None = None,
        applied_source: tuple[str, str] | None = None,
        nodes: Nodes | None = None,
    ) -> None:
        self.spec = spec
        # (inventory text, path) when `spec` comes from a recorded plan rather than the file
        # (a watchdog replaying the applied plan): recorded as applied instead of the file.
        self.applied_source = applied_source
        self.nodes: Nodes = nodes or NodeConnector(spec.ssh, nvml_lib=nvml_lib)
        self.node_timeout_s = node_timeout_s
        state = Path(state_dir) if state_dir else default_state_dir()
        self.state_dir = state
        self.history = BootHistory(state / "boots.jsonl")
        # What tpwarden did (restarts, stops), on the control machine: JSON lines, sorted keys.
        self.events = JsonlLog(state / "events.jsonl")
        self.emit = emitter(on_event)
        self._clock = clock
        self.server = ServerEndpoint(spec, self.nodes, http or httpx.Client(timeout=10.0))
        self.boot_follower = BootFollower(
            spec,
            self.nodes,
            history=self.history,
            observe=lambda: self.observe(),
            probe=lambda timeout: self.probe(timeout=timeout),
            emit=self.emit,
            clock=clock,
        )

    def close(self) -> None:
        self.nodes.close()
        self.events.close()

    def __enter__(self) -> Controller:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the nodes ------------------------------------------------------------------------------
    @property
    def pool(self) -> SshPool:
        """The real connector's SSH pool (tests of the SSH route read its sessions)."""
        if not isinstance(self.nodes, NodeConnector):
            raise AttributeError("pool: only the real NodeConnector has an SSH pool")
        return self.nodes.pool

    @property
    def nvml_lib(self) -> str | None:
        return getattr(self.nodes, "nvml_lib", None)

    @property
    def _http(self) -> httpx.Client:
        return self.server.http

    @_http.setter
    def _http(self, client: httpx.Client) -> None:
        self.server.http = client

    def now(self) -> datetime:
        """The injected clock as an aware UTC datetime."""
        return datetime.fromtimestamp(self._clock(), UTC)

    def session(self, node: NodeSpec) -> NodeSession:
        return self.nodes.session(node)

    def docker(self, node: NodeSpec) -> DockerGateway:
        return self.nodes.docker(node)

    def fan_out(
        self, nodes: Sequence[NodeSpec], fn: Callable[[NodeSpec], T], timeout: float | None = None
    ) -> dict[str, T | TpwardenError]:
        """Run `fn(node)` on every node in parallel; errors and timeouts become values."""
        return self.nodes.fan_out(nodes, fn, timeout)

    def collector(
        self, node: NodeSpec, args: Sequence[str], sudo: bool = False, timeout: float = 60.0
    ) -> JSONObject:
        """Copy the collector zipapp to the node, run it with python3, parse its JSON."""
        return self.nodes.collector(node, args, sudo=sudo, timeout=timeout)

    def observe(
        self,
        nodes: Sequence[NodeSpec] | None = None,
    ) -> dict[str, list[ContainerInfo] | TpwardenError]:
        selected = list(nodes or self.spec.nodes)
        return self.fan_out(
            selected,
            lambda n: self.docker(n).list_tpwarden(self.spec.name),
            timeout=self.node_timeout_s * 3,
        )

    def _observed_or_raise(self) -> dict[str, list[ContainerInfo]]:
        observed = self.observe()
        errors = [e for e in observed.values() if isinstance(e, TpwardenError)]
        if errors:
            raise errors[0]
        return {k: v for k, v in observed.items() if not isinstance(v, TpwardenError)}

    # -- plans ----------------------------------------------------------------------------------
    def cluster_plan(self) -> ClusterPlan:
        return plan_cluster(self.spec)

    def plan_up(self, replace: bool = False) -> ControlPlan:
        return plan_up(self.cluster_plan(), self._observed_or_raise(), replace)

    def plan_down(self) -> ControlPlan:
        return plan_down(self.spec.name, self._observed_or_raise(), self.spec.config_hash())

    def plan_restart(self) -> ControlPlan:
        return plan_restart(self.cluster_plan(), self._observed_or_raise())

    # -- pre-flight and apply -------------------------------------------------------------------
    def preflight(self, plan: ControlPlan) -> PreflightReport:
        """Image on every node, model/drafter paths, GPU visible + clock cap, head ports free."""
        return preflight(self.spec, self.nodes, plan, self.emit)

    def resolve_secrets(self, container: ContainerPlan) -> dict[str, str]:
        """Secret values for one container, read at apply time (see `tpwarden.cluster.control.apply`)."""
        return resolve_secrets(self.spec, self.nodes, container)

    def apply(self, plan: ControlPlan) -> tuple[NodeOutcome, ...]:
        """Removals on all nodes in parallel, then starts wave by wave (head first)."""
        return apply_plan(self.spec, self.nodes, plan, self.emit)

    # -- up, down, restart ----------------------------------------------------------------------
    def up(
        self,
        replace: bool = False,
        wait_ready: bool = True,
        timeout_s: float = 2400.0,
        preflight: bool = True,
        plan: ControlPlan | None = None,
        action: str = "up",
        who: str | None = None,
    ) -> ApplyResult:
        plan = plan or self.plan_up(replace)
        if plan.refused:
            raise Drift(plan.drift, plan.config_hash)
        if not plan.changes:
            self.emit("info", None, f"nothing to do: config {plan.config_hash} is running")
            if self.record_applied_if_changed(action, who):
                self.emit(
                    "info",
                    None,
                    "settings outside the serving config changed (watchdog, thermal, ...): "
                    "recorded in the applied plan, which the watchdog follows",
                )
            return ApplyResult(plan, tuple(NodeOutcome(s.node, True, s.reason) for s in plan.steps))
        if preflight:
            report = self.preflight(plan)
            if not report.ok:
                raise TpwardenError("pre-flight failed:\n  " + "\n  ".join(report.problems))
        outcomes = self.apply(plan)
        if all(o.ok for o in outcomes):
            self.record_applied(action, who)
        boot = None
        if wait_ready and all(o.ok for o in outcomes):
            boot = self.follow_boot(timeout_s=timeout_s)
        transport = None
        if boot is not None and boot.ready:  # recorded with the run: the event log too
            transport = self.nccl_transport()
            self.emit("info", None, str(transport["summary"]))
            for warning in transport.get("warnings") or []:
                self.emit("info", None, f"warning: {warning}")
        return ApplyResult(plan, outcomes, boot, transport)

    def down(self, plan: ControlPlan | None = None) -> ApplyResult:
        plan = plan or self.plan_down()
        return ApplyResult(plan, self.apply(plan))

    def restart(
        self, why: str, timeout_s: float = 2400.0, wait_ready: bool = True, who: str | None = None
    ) -> ApplyResult:
        plan = self.plan_restart()
        self.events.append(
            {
                "ts": self.now().isoformat(),
                "event": "restart",
                "who": who or operator_identity(),
                "why": why,
                "cluster": self.spec.name,
                "config_hash": plan.config_hash,
                "plan": plan.to_json(),
            }
        )
        return self.up(
            plan=plan, wait_ready=wait_ready, timeout_s=timeout_s, action="restart", who=who
        )

    def record_stop(self, why: str, who: str) -> None:
        """A stop the watchdog is meant to restart (`rollout --via watchdog`), in the event log."""
        self.events.append({"ts": self._clock(), "event": "stop", "who": who, "why": why})

    def record_applied(self, action: str, who: str | None = None) -> AppliedPlan | None:
        """Record the plan just applied where every actor reads it (this machine, head node)."""
        plan = self._applied_record(action, who)
        if plan is not None:
            self._write_applied(plan)
        return plan

    def record_applied_if_changed(self, action: str, who: str | None = None) -> bool:
        """An `up` with nothing to start still records the inventory when it differs from the
        plan recorded here (a watchdog setting changed, say), so the watchdog follows it without
        a restart of the server (issue 29 item 2). True when it recorded."""
        plan = self._applied_record(action, who)
        if plan is None:
            return False
        try:
            recorded = read_applied(local_paths(self.spec, self.state_dir)[0])
        except (ValueError, KeyError, TypeError, AttributeError):
            recorded = None
        if recorded is None or recorded.inventory_revision == plan.inventory_revision:
            return False  # nothing recorded here (another control machine's plan): keep it
        self._write_applied(plan)
        return True

    def _applied_record(self, action: str, who: str | None) -> AppliedPlan | None:
        if self.applied_source is not None:
            text, path = self.applied_source
            plan: AppliedPlan | None = AppliedPlan(
                cluster=self.spec.name,
                config_hash=self.spec.config_hash(),
                inventory_revision=applied_revision(text),
                inventory_text=text,
                inventory_path=path,
                action=action,
                by=who or operator_identity(),
                applied_at=self._clock(),
            )
        else:
            plan = plan_for(self.spec, action, who or operator_identity(), self._clock())
        return plan

    def _write_applied(self, plan: AppliedPlan) -> None:
        try:
            write_local(plan, local_paths(self.spec, self.state_dir))
        except OSError as exc:
            log.warning("could not record the applied plan here: %s", exc)
        if not is_local(self.spec.head):
            write_head(plan, self.session(self.spec.head), self.spec.watchdog.state_dir)

    # -- boot ------------------------------------------------------------------------------------
    def probe(self, timeout: float = 30.0) -> ServerProbe:
        """The watchdog's 1-token probe (`probe_completion`), judged by the same `is_healthy`:
        healthy or not, the latency when the server answered, why not."""
        return self.server.probe(timeout=timeout)

    def metrics_page(self, timeout_s: float = 5.0) -> tuple[int, str]:
        """The server's `GET /metrics` as (HTTP status, text); ProbeError when no answer."""
        return self.server.metrics_page(timeout_s)

    def api_key(self) -> str | None:
        """The API key as the probe sends it; None when it cannot be resolved here."""
        return self.server.api_key()

    def follow_boot(self, timeout_s: float = 2400.0, poll_s: float = 0.5) -> BootResult:
        """Follow the head's log through the boot phases until a 1-token completion answers,
        a container exits, the log shows a fatal error, or `timeout_s` passes."""
        return self.boot_follower.follow(timeout_s=timeout_s, poll_s=poll_s)

    def attach_boot(self, timeout_s: float = 2400.0) -> BootResult:
        """`tpwarden boot`: replay the head's log so far, then follow it like `up` does."""
        return self.follow_boot(timeout_s=timeout_s)

    def dead_containers(self) -> list[str]:
        """'node: container gone/exited (code)' for every node whose container is not up."""
        return self.boot_follower.dead_containers()

    def head_container(self) -> ContainerInfo | None:
        """The head's serving container as its engine reports it (any state); None if absent."""
        return self.boot_follower.head_container()

    def boot_progress(self) -> BootProgress | None:
        """Where the head's current container is in its boot, from its whole log so far; None
        without a head container. For the watchdog."""
        return self.boot_follower.progress()

    # -- logs, status, clocks --------------------------------------------------------------------
    def last_log_lines(self, tail: int = 20) -> dict[str, str]:
        return last_log_lines(self.spec, self.nodes, tail)

    def logs(self, node: str | None = None, tail: int = 100) -> dict[str, str]:
        return tail_logs(self.spec, self.nodes, node, tail)

    def follow_logs(self, node: str | None = None, tail: int = 10) -> Iterator[tuple[str, str]]:
        """(node, line) from every selected node's container, interleaved as they come."""
        return follow_logs(self.spec, self.nodes, node, tail)

    def status(self, timeout_s: float | None = None, with_gpus: bool = True) -> ClusterStatus:
        """Nodes and server in parallel, each bounded by `timeout_s`; never raises for a node."""
        return gather_status(
            self.spec,
            self.nodes,
            self._server_status,
            self.now(),
            timeout_s or self.node_timeout_s,
            with_gpus,
            transport=lambda t: self.nccl_transport(t),
        )

    def nccl_transport(self, timeout_s: float | None = None) -> JSONObject:
        """Which network NCCL chose on each rank, read once per container from its log and
        kept under the state dir; the first reading of a container is an event."""

        def record(doc: JSONObject) -> None:
            self.events.append({"ts": self.now().isoformat(), **doc})

        per_node, summary, warnings = gather_transport(
            self.spec, self.nodes, self.state_dir / "nccl", record,
            timeout_s or self.node_timeout_s * 3,
        )  # fmt: skip
        return {
            "summary": summary,
            "nodes": {n: t.to_json() for n, t in per_node.items()},
            "warnings": list(warnings),
        }

    def _server_status(self, deadline: float) -> ServerStatus:
        return self.server.status(deadline)

    def clocks(self, action: str, mhz: int | None = None) -> list[ClockResult]:
        """`show`, `cap MHZ` (lock 0..MHZ, verified by reading back) or `reset`, every node."""
        return set_clocks(self.spec, self.nodes, action, mhz)
