"""Cluster control: up, down, restart, status, logs, boot following and the clock cap.

The `Controller` holds one SSH session and one Docker gateway per node for the duration of one
servectl command and fans out over nodes with a thread pool. It never prints: it returns typed
results and reports progress through an `on_event` callback. Planning is pure
(`servectl.cluster.control_plan`), the verdict is pure (`servectl.cluster.status.derive_verdict`).
"""

from __future__ import annotations

import getpass
import json
import logging
import os
import queue
import re
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, wait
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import httpx
from servectl.cluster.applied import AppliedPlan, local_paths, plan_for, write_head, write_local
from servectl.cluster.applied import revision as applied_revision
from servectl.cluster.boot import (
    BootHistory,
    BootProgress,
    BootTracker,
    Phase,
    phase_durations,
)
from servectl.cluster.collector import build_zipapp
from servectl.cluster.control_plan import (
    Action,
    ControlPlan,
    Drift,
    plan_down,
    plan_restart,
    plan_up,
)
from servectl.cluster.docker_gw import ContainerInfo, DockerGateway, LogStream
from servectl.cluster.durable import JsonlLog, default_state_dir
from servectl.cluster.errors import (
    CommandFailed,
    DockerError,
    NodeUnreachable,
    ProbeError,
    ServectlError,
)
from servectl.cluster.launch import ClusterPlan, ContainerPlan, plan_cluster
from servectl.cluster.metrics_text import sum_by_sample
from servectl.cluster.secrets import resolve_secret
from servectl.cluster.spec import ClusterSpec, NodeSpec
from servectl.cluster.ssh import NodeSession, SshPool
from servectl.cluster.status import (
    ClusterStatus,
    NodeStatus,
    ServerStatus,
    derive_verdict,
    node_memory,
    server_gauges,
)
from servectl.watchdog.probe import is_healthy, probe_completion

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class ControlEvent:
    """Progress report for the CLI: `kind` in preflight/remove/start/boot/ready/failed/info."""

    kind: str
    node: str | None
    message: str
    progress: BootProgress | None = None


EventCallback = Callable[[ControlEvent], None]


@dataclass(frozen=True)
class NodeOutcome:
    node: str
    ok: bool
    message: str


@dataclass(frozen=True)
class PreflightReport:
    ok: bool
    problems: tuple[str, ...]
    facts: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class BootResult:
    ready: bool
    progress: BootProgress
    elapsed_s: float
    reason: str | None = None
    last_lines: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ApplyResult:
    plan: ControlPlan
    outcomes: tuple[NodeOutcome, ...]
    boot: BootResult | None = None

    @property
    def ok(self) -> bool:
        return all(o.ok for o in self.outcomes) and (self.boot is None or self.boot.ready)


@dataclass(frozen=True)
class ClockResult:
    node: str
    ok: bool
    message: str
    gpus: tuple[Mapping[str, Any], ...] = ()


def _who() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return f"{user}@{socket.gethostname()}"


def is_local(node: NodeSpec) -> bool:
    """The node is this machine: its docker engine is reached by the local socket."""
    return node.ssh_host == "local"


class Controller:
    """Acts on one cluster. Constructing it connects to nothing; use as a context manager."""

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
    ) -> None:
        self.spec = spec
        # (inventory text, path) when `spec` comes from a recorded plan rather than the file
        # (a watchdog replaying the applied plan): recorded as applied instead of the file.
        self.applied_source = applied_source
        self.pool = SshPool(spec.ssh)
        self.node_timeout_s = node_timeout_s
        state = Path(state_dir) if state_dir else default_state_dir()
        self.state_dir = state
        self.history = BootHistory(state / "boots.jsonl")
        # What servectl did (restarts, stops), on the control machine: JSON lines, sorted keys.
        self.events = JsonlLog(state / "events.jsonl")
        self._on_event = on_event or (lambda e: None)
        self._http = http or httpx.Client(timeout=10.0)
        self._clock = clock
        self._docker: dict[str, DockerGateway] = {}
        self._docker_lock = threading.Lock()
        self._tmp = tempfile.TemporaryDirectory(prefix="servectl-")
        self._collector: Path | None = None
        self._collector_lock = threading.Lock()  # fan-out threads must not build it twice
        self.nvml_lib = nvml_lib or os.environ.get("SERVECTL_NVML_LIB")

    def close(self) -> None:
        for gw in list(self._docker.values()):
            gw.close()
        self._docker.clear()
        self.pool.close()
        self.events.close()
        self._tmp.cleanup()

    def __enter__(self) -> Controller:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plumbing -----------------------------------------------------------------------------
    def emit(
        self, kind: str, node: str | None, message: str, progress: BootProgress | None = None
    ) -> None:
        try:
            self._on_event(ControlEvent(kind, node, message, progress))
        except Exception:  # noqa: BLE001 - a broken renderer must not break an apply
            log.exception("event callback failed")

    def session(self, node: NodeSpec) -> NodeSession:
        return self.pool.session(node)

    def docker(self, node: NodeSpec) -> DockerGateway:
        with self._docker_lock:
            gw = self._docker.get(node.name)
        if gw is not None:
            return gw
        gw = (
            DockerGateway.local(node.name)
            if is_local(node)
            else DockerGateway.over_ssh(self.session(node), timeout=60)
        )
        with self._docker_lock:
            self._docker.setdefault(node.name, gw)
            return self._docker[node.name]

    def fan_out(
        self, nodes: Sequence[NodeSpec], fn: Callable[[NodeSpec], T], timeout: float | None = None
    ) -> dict[str, T | ServectlError]:
        """Run `fn(node)` on every node in parallel; errors and timeouts become values."""
        results: dict[str, T | ServectlError] = {}
        if not nodes:
            return results
        # One daemon thread per node, not a ThreadPoolExecutor: the interpreter joins executor
        # workers at exit, so a node frozen mid-call kept `servectl status` alive after it had
        # printed. A daemon thread blocked on a dead node is abandoned when the command ends.
        futures = {_daemon_call(fn, n, f"servectl-{n.name}"): n for n in nodes}
        done, _ = wait(futures, timeout=timeout)
        for fut, node in futures.items():
            if fut not in done:
                results[node.name] = NodeUnreachable(node.name, f"no answer within {timeout:g} s")
                continue
            try:
                results[node.name] = fut.result()
            except ServectlError as e:
                results[node.name] = e
            except Exception as e:  # noqa: BLE001 - one node's bug must not hide the others
                log.exception("%s: unexpected error", node.name)
                results[node.name] = ServectlError(f"{node.name}: {type(e).__name__}: {e}")
        return results

    def collector(
        self, node: NodeSpec, args: Sequence[str], sudo: bool = False, timeout: float = 60.0
    ) -> dict[str, Any]:
        """Copy the collector zipapp to the node, run it with python3, parse its JSON."""
        with self._collector_lock:
            if self._collector is None:
                self._collector = build_zipapp(Path(self._tmp.name) / "servectl-collector.pyz")
        extra = ["--nvml-lib", self.nvml_lib] if self.nvml_lib else []
        result = self.session(node).run_script(
            str(self._collector),
            [*extra, *args],
            interpreter=["python3"],
            sudo=sudo,
            timeout=timeout,
        )
        try:
            return json.loads(result.stdout)
        except json.JSONDecodeError:
            raise CommandFailed(
                node.name, ["collector", *args], result.rc, result.stderr or result.stdout
            ) from None

    def observe(
        self,
        nodes: Sequence[NodeSpec] | None = None,
    ) -> dict[str, list[ContainerInfo] | ServectlError]:
        nodes = list(nodes or self.spec.nodes)
        return self.fan_out(
            nodes,
            lambda n: self.docker(n).list_servectl(self.spec.name),
            timeout=self.node_timeout_s * 3,
        )

    def _observed_or_raise(self) -> dict[str, list[ContainerInfo]]:
        observed = self.observe()
        errors = [e for e in observed.values() if isinstance(e, ServectlError)]
        if errors:
            raise errors[0]
        return {k: v for k, v in observed.items() if not isinstance(v, ServectlError)}

    # -- plans ----------------------------------------------------------------------------------
    def cluster_plan(self) -> ClusterPlan:
        return plan_cluster(self.spec)

    def plan_up(self, replace: bool = False) -> ControlPlan:
        return plan_up(self.cluster_plan(), self._observed_or_raise(), replace)

    def plan_down(self) -> ControlPlan:
        return plan_down(self.spec.name, self._observed_or_raise(), self.spec.config_hash())

    def plan_restart(self) -> ControlPlan:
        return plan_restart(self.cluster_plan(), self._observed_or_raise())

    # -- pre-flight ----------------------------------------------------------------------------
    def preflight(self, plan: ControlPlan) -> PreflightReport:
        """Image on every node, model/drafter paths, GPU visible + clock cap, head ports free."""
        s = self.spec.serving
        starting = {st.node for st in plan.steps if st.container is not None}
        nodes = [n for n in self.spec.nodes if n.name in starting]
        head_removed = any(st.node == self.spec.head.name and st.remove for st in plan.steps)
        paths = [s.model.path] + ([s.drafter.path] if s.drafter and s.drafter.path else [])

        def check(node: NodeSpec) -> list[str]:
            problems = []
            if not self.docker(node).image_present(s.image):
                problems.append(
                    f"{node.name}: image {s.image} is not present (docker pull/load "
                    f"it on the node first)"
                )
            found = self.collector(node, ["paths", *paths]).get("paths", {})
            for p in paths:
                if not found.get(p, {}).get("exists"):
                    problems.append(f"{node.name}: {p} does not exist")
            if node.role == "head" and not head_removed:
                # Each port where it will be bound: the API on servectl.host, the rendezvous on
                # the head's vllm_host_ip.
                for host, port in ((s.host, s.port), (node.vllm_host_ip, s.parallel.master_port)):
                    busy = self.collector(node, ["ports", "--host", host, str(port)]).get(
                        "ports", {}
                    )
                    info = busy.get(str(port), {})
                    if not info.get("free", False):
                        problems.append(f"{node.name}: port {host}:{port} is {info.get('reason')}")
            if s.gpus == "all" or s.gpu_clock_cap_mhz:
                args = ["cap", str(s.gpu_clock_cap_mhz)] if s.gpu_clock_cap_mhz else ["show"]
                doc = self.collector(node, args, sudo=bool(s.gpu_clock_cap_mhz))
                problems.extend(_gpu_problems(node.name, doc, s.gpu_clock_cap_mhz))
            return problems

        self.emit("preflight", None, f"checking {len(nodes)} node(s)")
        results = self.fan_out(nodes, check, timeout=120)
        problems: list[str] = []
        for name, r in results.items():
            if isinstance(r, ServectlError):
                problems.append(f"{name}: {r}")
            else:
                problems.extend(r)
        return PreflightReport(not problems, tuple(sorted(problems)))

    # -- apply ---------------------------------------------------------------------------------
    def resolve_secrets(self, container: ContainerPlan) -> dict[str, str]:
        """Secret values for one container, read at apply time: env vars here, files on the
        node over SFTP. Never logged, never in a plan or argv."""
        values: dict[str, str] = {}
        node = self.spec.node(container.node)
        for env_name, ref in container.secret_env.items():
            values[env_name] = resolve_secret(
                ref,
                read_file=lambda path: self.session(node).read_bytes(path).decode(),
                environ=os.environ,
                what=f"secret for {env_name}",
                where="on this machine",
            )
        return values

    def apply(self, plan: ControlPlan) -> tuple[NodeOutcome, ...]:
        """Removals on all nodes in parallel, then starts wave by wave (head first)."""
        if plan.refused:
            raise Drift(plan.drift, plan.config_hash)
        by_name = {n.name: n for n in self.spec.nodes}
        outcomes: dict[str, NodeOutcome] = {}
        removing = [by_name[s.node] for s in plan.steps if s.remove]

        def remove(node: NodeSpec) -> str:
            step = plan.step(node.name)
            gw = self.docker(node)
            for name in step.remove:
                gw.remove(name)
            self.emit("remove", node.name, f"removed {', '.join(step.remove)}")
            return f"removed {', '.join(step.remove)}"

        for name, r in self.fan_out(removing, remove, timeout=180).items():
            outcomes[name] = NodeOutcome(name, not isinstance(r, ServectlError), str(r))
        if any(not o.ok for o in outcomes.values()):
            return tuple(outcomes.values())

        def start(node: NodeSpec) -> str:
            c = plan.step(node.name).container
            assert c is not None
            info = self.docker(node).run(c, self.resolve_secrets(c))
            self.emit("start", node.name, f"started {info.name} ({info.id[:12]})")
            return f"started {info.name}"

        for wave in plan.waves:
            nodes = [by_name[n] for n in wave if plan.step(n).container is not None]
            for name, r in self.fan_out(nodes, start, timeout=180).items():
                outcomes[name] = NodeOutcome(name, not isinstance(r, ServectlError), str(r))
            if any(not o.ok for o in outcomes.values()):
                break
        self._exec_after_start(plan, outcomes)
        for st in plan.steps:
            if st.action is Action.KEEP and st.node not in outcomes:
                outcomes[st.node] = NodeOutcome(st.node, True, st.reason)
        return tuple(outcomes[n.name] for n in self.spec.nodes if n.name in outcomes)

    def _exec_after_start(self, plan: ControlPlan, outcomes: dict[str, NodeOutcome]) -> None:
        """Ray path: once every rank's container runs, exec `vllm serve` in the head's."""
        for st in plan.steps:
            c = st.container
            if c is None or not c.exec_after_start or not all(o.ok for o in outcomes.values()):
                continue
            gw = self.docker(self.spec.node(st.node))
            try:
                ex = gw.api.exec_create(
                    c.name, list(c.exec_after_start), environment=self.resolve_secrets(c)
                )
                gw.api.exec_start(ex["Id"], detach=True)
                self.emit("start", st.node, "exec'd vllm serve in the Ray head")
            except Exception as e:  # noqa: BLE001 - reported per node
                outcomes[st.node] = NodeOutcome(st.node, False, f"exec vllm serve: {e}")

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
            return ApplyResult(plan, tuple(NodeOutcome(s.node, True, s.reason) for s in plan.steps))
        if preflight:
            report = self.preflight(plan)
            if not report.ok:
                raise ServectlError("pre-flight failed:\n  " + "\n  ".join(report.problems))
        outcomes = self.apply(plan)
        if all(o.ok for o in outcomes):
            self.record_applied(action, who)
        boot = None
        if wait_ready and all(o.ok for o in outcomes):
            boot = self.follow_boot(timeout_s=timeout_s)
        return ApplyResult(plan, outcomes, boot)

    def down(self, plan: ControlPlan | None = None) -> ApplyResult:
        plan = plan or self.plan_down()
        return ApplyResult(plan, self.apply(plan))

    def restart(
        self, why: str, timeout_s: float = 2400.0, wait_ready: bool = True, who: str | None = None
    ) -> ApplyResult:
        plan = self.plan_restart()
        self.events.append(
            {
                "ts": datetime.now(UTC).isoformat(),
                "event": "restart",
                "who": who or _who(),
                "why": why,
                "cluster": self.spec.name,
                "config_hash": plan.config_hash,
                "plan": plan.to_json(),
            }
        )
        return self.up(
            plan=plan, wait_ready=wait_ready, timeout_s=timeout_s, action="restart", who=who
        )

    def record_applied(self, action: str, who: str | None = None) -> AppliedPlan | None:
        """Record the plan just applied where every actor reads it (this machine, head node)."""
        if self.applied_source is not None:
            text, path = self.applied_source
            plan: AppliedPlan | None = AppliedPlan(
                cluster=self.spec.name,
                config_hash=self.spec.config_hash(),
                inventory_revision=applied_revision(text),
                inventory_text=text,
                inventory_path=path,
                action=action,
                by=who or _who(),
                applied_at=self._clock(),
            )
        else:
            plan = plan_for(self.spec, action, who or _who(), self._clock())
        if plan is None:
            return None
        try:
            write_local(plan, local_paths(self.spec, self.state_dir))
        except OSError as exc:
            log.warning("could not record the applied plan here: %s", exc)
        if not is_local(self.spec.head):
            write_head(plan, self.session(self.spec.head), self.spec.watchdog.state_dir)
        return plan

    # -- boot ------------------------------------------------------------------------------------
    def probe(self, timeout: float = 30.0) -> tuple[bool, float | None, str | None]:
        """The watchdog's 1-token probe (`probe_completion`), judged by the same `is_healthy`:
        (ok, latency ms when the server answered, error)."""
        key = self._api_key()
        result = probe_completion(
            self._http,
            f"{self.spec.api_base}/v1/completions",
            self.spec.serving.model.served_name,
            timeout_s=timeout,
            headers={"Authorization": f"Bearer {key}"} if key else None,
        )
        ms = None if result.status_code is None else result.latency_s * 1000
        if is_healthy(result):
            return True, ms, None
        return False, ms, f"{result.outcome.value}: {result.detail}"

    def metrics_page(self, timeout_s: float = 5.0) -> tuple[int, str]:
        """The server's `GET /metrics` as (HTTP status, text); ProbeError when no answer."""
        try:
            r = self._http.get(f"{self.spec.api_base}/metrics", timeout=timeout_s)
        except httpx.HTTPError as exc:
            raise ProbeError(f"{type(exc).__name__}: {exc}") from exc
        return r.status_code, r.text

    def _api_key(self) -> str | None:
        """The API key as the probe sends it; None when it cannot be resolved here."""
        ref = self.spec.secrets.api_key
        if ref is None:
            return None
        try:
            return resolve_secret(
                ref,
                read_file=lambda path: self.session(self.spec.head).read_bytes(path).decode(),
                environ=os.environ,
                what="the API key",
                where="on this machine",
            )
        except ServectlError:
            return None

    def follow_boot(self, timeout_s: float = 2400.0, poll_s: float = 0.5) -> BootResult:
        """Follow the head's log through the boot phases until a 1-token completion answers,
        a container exits, the log shows a fatal error, or `timeout_s` passes."""
        head = self.spec.head
        start = self._clock()
        tracker = BootTracker(self.history.medians(self.spec.name), started_at=start)
        lines: queue.Queue[str | None] = queue.Queue()
        gw = self.docker(head)
        name = plan_cluster(self.spec).for_node(head.name).name
        stream = gw.follow_logs(name, tail="all")
        threading.Thread(
            target=_pump, args=(stream, lines), daemon=True, name="servectl-boot-log"
        ).start()
        deadline = time.monotonic() + timeout_s
        next_state_check = next_probe = 0.0
        reason: str | None = None
        try:
            while True:
                now = self._clock()
                try:
                    line = lines.get(timeout=poll_s)
                    if line is None:
                        reason = reason or "head log ended"
                    else:
                        progress = tracker.feed(line, now)
                        self.emit("boot", head.name, progress.describe(), progress)
                        continue
                except queue.Empty:
                    pass
                progress = tracker.tick(now)
                self.emit("boot", head.name, progress.describe(), progress)
                if progress.failed:
                    # the root cause often follows the line that says the engine failed (the
                    # traceback comes after "EngineCore failed to start."): read what is queued
                    progress = _drain(lines, tracker, now)
                    reason = progress.failure_text or "boot failed"
                    break
                mono = time.monotonic()
                if mono >= next_state_check:
                    next_state_check = mono + 2.0
                    dead = self.dead_containers()
                    if dead:
                        # the cause the log holds (root exception, last ERROR), exit as context
                        progress = tracker.fail("; ".join(dead), now)
                        reason = progress.failure_text or "; ".join(dead)
                        break
                if mono >= next_probe:
                    # probe every second once the API is starting; every 5 s before, in case
                    # a log line we know was missed
                    late = progress.phase.order >= Phase.API_STARTING.order
                    next_probe = mono + (1.0 if late else 5.0)
                    ok, _, _ = self.probe(timeout=10)
                    if ok:
                        progress = tracker.mark_ready(now)
                        ended = self._clock()
                        self.history.record(
                            self.spec.name,
                            self.spec.config_hash(),
                            phase_durations(tracker.phase_times, ended),
                            ended - start,
                        )
                        self.emit("ready", head.name, "answering a 1-token completion", progress)
                        return BootResult(True, progress, ended - start)
                if progress.ready:
                    # log says ready: probe right away on the next loop
                    next_probe = 0.0
                if mono > deadline:
                    reason = f"not answering after {timeout_s:g} s"
                    tracker.fail(reason, now)
                    break
        finally:
            stream.close()
        last = self.last_log_lines(20)
        self.emit("failed", None, reason or "boot failed", tracker.progress)
        return BootResult(False, tracker.progress, self._clock() - start, reason, last)

    def dead_containers(self) -> list[str]:
        """'node: container gone/exited (code)' for every node whose container is not up."""
        dead = []
        for name, r in self.observe().items():
            if isinstance(r, ServectlError):
                continue
            if not r:
                dead.append(f"{name}: container gone")
            for c in r:
                if c.state in ("exited", "dead"):
                    dead.append(f"{name}: container exited ({c.exit_code})")
        return dead

    def last_log_lines(self, tail: int = 20) -> dict[str, str]:
        def get(node: NodeSpec) -> str:
            containers = self.docker(node).list_servectl(self.spec.name)
            return "\n".join(self.docker(node).logs(c.id, tail=tail) for c in containers)

        return {
            k: (str(v) if isinstance(v, ServectlError) else v)
            for k, v in self.fan_out(list(self.spec.nodes), get, timeout=30).items()
        }

    def head_container(self) -> ContainerInfo | None:
        """The head's serving container as its engine reports it (any state); None if absent."""
        found = self.docker(self.spec.head).list_servectl(self.spec.name)
        return (
            max(found, key=lambda c: c.started_at or datetime.min.replace(tzinfo=UTC))
            if found
            else None
        )

    def boot_progress(self) -> BootProgress | None:
        """Where the head's current container is in its boot, from its whole log so far (one
        `docker logs` read, no follower); None without a head container. For the watchdog."""
        c = self.head_container()
        if c is None:
            return None
        text = self.docker(self.spec.head).logs(c.id, tail="all")
        started = c.started_at.timestamp() if c.started_at else None
        tracker = BootTracker(self.history.medians(self.spec.name), started_at=started)
        now = self._clock()
        progress = tracker.feed_lines(re.split(r"[\r\n]+", text), now)
        if c.state in ("exited", "dead") and not progress.failed:
            progress = tracker.fail(f"head container exited ({c.exit_code})", now)
        return progress

    def attach_boot(self, timeout_s: float = 2400.0) -> BootResult:
        """`servectl boot`: replay the head's log so far, then follow it like `up` does."""
        return self.follow_boot(timeout_s=timeout_s)

    # -- logs ------------------------------------------------------------------------------------
    def logs(self, node: str | None = None, tail: int = 100) -> dict[str, str]:
        nodes = [self.spec.node(node)] if node else list(self.spec.nodes)

        def get(n: NodeSpec) -> str:
            cs = self.docker(n).list_servectl(self.spec.name)
            return "\n".join(self.docker(n).logs(c.id, tail=tail) for c in cs)

        return {
            k: (f"<{v}>" if isinstance(v, ServectlError) else v)
            for k, v in self.fan_out(nodes, get, timeout=60).items()
        }

    def follow_logs(self, node: str | None = None, tail: int = 10) -> Iterator[tuple[str, str]]:
        """(node, line) from every selected node's container, interleaved as they come."""
        nodes = [self.spec.node(node)] if node else list(self.spec.nodes)
        q: queue.Queue[tuple[str, str | None]] = queue.Queue()
        streams: list[LogStream] = []
        for n in nodes:
            for c in self.docker(n).list_servectl(self.spec.name):
                st = self.docker(n).follow_logs(c.id, tail=tail)
                streams.append(st)
                threading.Thread(target=_pump_tagged, args=(n.name, st, q), daemon=True).start()
        open_streams = len(streams)
        try:
            while open_streams:
                name, line = q.get()
                if line is None:
                    open_streams -= 1
                    continue
                yield name, line
        finally:
            for st in streams:
                st.close()

    # -- status ----------------------------------------------------------------------------------
    def status(self, timeout_s: float | None = None, with_gpus: bool = True) -> ClusterStatus:
        """Nodes and server in parallel, each bounded by `timeout_s`; never raises for a node."""
        timeout_s = timeout_s or self.node_timeout_s
        t0 = time.monotonic()
        want = self.spec.config_hash()
        now = datetime.now(UTC)

        def node_status(node: NodeSpec) -> NodeStatus:
            t = time.monotonic()
            containers = self.docker(node).list_servectl(self.spec.name)
            c = containers[0] if containers else None
            gpus: tuple[Mapping[str, Any], ...] = ()
            gpu_reason = None
            zones: tuple[Mapping[str, Any], ...] = ()
            memory = None
            if with_gpus:
                try:
                    doc = self.collector(node, ["show"], timeout=timeout_s)
                    gpus = tuple(doc.get("gpus") or ())
                    zones = tuple(doc.get("zones") or ())
                    memory = node_memory(doc, gpus)
                    nv = doc.get("nvml") or {}
                    if not nv.get("available", False):
                        gpu_reason = nv.get("reason") or nv.get("state")
                except ServectlError as e:
                    gpu_reason = str(e)
            return NodeStatus(
                node=node.name,
                role=node.role,
                reachable=True,
                container=c.name if c else None,
                state=c.state if c else None,
                uptime_s=c.uptime_s(now) if c else None,
                exit_code=c.exit_code if c else None,
                config_hash=c.config_hash if c else None,
                drift=bool(c and c.config_hash != want),
                gpus=gpus,
                gpu_reason=gpu_reason,
                elapsed_s=round(time.monotonic() - t, 3),
                zones=zones,
                memory=memory,
            )

        # The server part shares the command's deadline: a hung engine makes the 1-token probe
        # wait, and /health's answer must still make it into the status.
        server_deadline = t0 + min(timeout_s, 10.0)
        server_future = _daemon_call(
            lambda _n: self._server_status(server_deadline), self.spec.head, "servectl-server"
        )
        results = self.fan_out(list(self.spec.nodes), node_status, timeout=timeout_s)
        nodes = []
        for n in self.spec.nodes:
            r = results[n.name]
            if isinstance(r, NodeStatus):
                nodes.append(r)
            else:
                reason = r.reason if isinstance(r, NodeUnreachable) else str(r)
                reachable = isinstance(r, DockerError)
                nodes.append(NodeStatus(n.name, n.role, reachable, reason))
        try:
            server = server_future.result(
                timeout=max(0.1, timeout_s + 1.0 - (time.monotonic() - t0))
            )
        except Exception as e:  # noqa: BLE001 - a status never raises for the server part
            server = ServerStatus(self.spec.api_base, health_error=str(e) or "timed out")
        verdict, notes = derive_verdict(nodes, server)
        return ClusterStatus(
            self.spec.name,
            want,
            verdict,
            tuple(nodes),
            server,
            round(time.monotonic() - t0, 3),
            notes,
        )

    def _server_status(self, deadline: float) -> ServerStatus:
        base = self.spec.api_base
        s = self.spec.serving
        k = s.drafter.num_speculative_tokens if s.drafter else None

        def left(share: float = 1.0) -> float:
            return max(0.5, (deadline - time.monotonic()) * share)

        try:
            health = self._http.get(f"{base}/health", timeout=left(0.3))
        except httpx.HTTPError as e:
            return ServerStatus(
                base,
                health_error=f"{type(e).__name__}: {e}",
                drafter_k=k,
                probe_error="server not answering",
            )
        model = max_len = None
        try:
            data = self._http.get(f"{base}/v1/models", timeout=left(0.3)).json()["data"][0]
            model, max_len = data.get("id"), data.get("max_model_len")
        except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError):
            pass
        gauges: dict[str, float | None] = {}
        try:
            gauges = server_gauges(
                sum_by_sample(self._http.get(f"{base}/metrics", timeout=left(0.3)).text)
            )
        except (httpx.HTTPError, ValueError):  # no page, or not exposition format: no gauges
            pass
        ok, ms, err = self.probe(timeout=left())
        return ServerStatus(
            base,
            health.status_code,
            None,
            model,
            max_len,
            ok,
            None if ms is None else round(ms, 1),
            err,
            gauges.get("requests_running"),
            gauges.get("requests_waiting"),
            gauges.get("kv_cache_usage_pct"),
            k,
        )

    # -- clocks ----------------------------------------------------------------------------------
    def clocks(self, action: str, mhz: int | None = None) -> list[ClockResult]:
        """`show`, `cap MHZ` (lock 0..MHZ, verified by reading back) or `reset`, every node."""
        args = {"show": ["show"], "cap": ["cap", str(mhz)], "reset": ["reset"]}[action]

        def run(node: NodeSpec) -> ClockResult:
            doc = self.collector(node, args, sudo=action != "show")
            gpus = tuple(doc.get("gpus") or ())
            problems = _gpu_problems(node.name, doc, mhz if action == "cap" else None)
            if action == "reset":
                problems += [
                    f"{node.name}: GPU{g.get('index')} still capped at "
                    f"{g['locked_clock_max_mhz']} MHz"
                    for g in gpus
                    if g.get("locked_clock_max_mhz")
                ]
            return ClockResult(node.name, not problems, "; ".join(problems) or "ok", gpus)

        results = self.fan_out(list(self.spec.nodes), run, timeout=120)
        return [
            r if isinstance(r, ClockResult) else ClockResult(name, False, str(r))
            for name, r in results.items()
        ]


def _gpu_problems(node: str, doc: Mapping[str, Any], cap: int | None) -> list[str]:
    """Pure: collector JSON -> problems (no GPU, action failed, cap not read back)."""
    problems = []
    if not doc.get("ok", False):
        problems.append(f"{node}: {doc.get('action')}: {doc.get('error')}")
    nv = doc.get("nvml") or {}
    gpus = doc.get("gpus") or []
    if not nv.get("available", False) or not gpus:
        problems.append(f"{node}: no GPU visible ({nv.get('reason') or nv.get('state')})")
    if cap:
        for g in gpus:
            got = g.get("locked_clock_max_mhz")
            if got != cap:
                problems.append(f"{node}: GPU{g.get('index')} clock cap reads {got}, want {cap}")
    return problems


def _daemon_call(fn: Callable[[NodeSpec], T], node: NodeSpec, name: str) -> Future[T]:
    """`fn(node)` on a daemon thread; its outcome in a Future."""
    fut: Future[T] = Future()
    fut.set_running_or_notify_cancel()

    def target() -> None:
        try:
            fut.set_result(fn(node))
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting caller
            fut.set_exception(exc)

    threading.Thread(target=target, name=name, daemon=True).start()
    return fut


def _drain(lines: queue.Queue[str | None], tracker: BootTracker, now: float) -> BootProgress:
    """Feed what the log pump already has (up to 2 s more) into a failed boot's tracker."""
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=0.2)
        except queue.Empty:
            break
        if line is None:
            break
        tracker.feed(line, now)
    return tracker.progress


def _pump(stream: LogStream, q: queue.Queue[str | None]) -> None:
    try:
        for line in stream:
            q.put(line)
    except ServectlError as e:
        q.put(f"servectl: log stream error: {e}")
    finally:
        q.put(None)


def _pump_tagged(node: str, stream: LogStream, q: queue.Queue[tuple[str, str | None]]) -> None:
    try:
        for line in stream:
            q.put((node, line))
    except ServectlError as e:
        q.put((node, f"<{e}>"))
    finally:
        q.put((node, None))
