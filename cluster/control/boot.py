"""Following the head's boot: its log through the boot phases until a 1-token completion
answers (`up`, `tpwarden boot`), and the boot's progress read from the log so far (the
watchdog). Time comes from the injected wall clock; waits are bounded by the monotonic one."""

from __future__ import annotations

import queue
import re
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Protocol

from tpwarden.cluster.boot.crash_report import CRASH_TAIL_LINES, cluster_crash, with_crash
from tpwarden.cluster.boot.history import BootHistory, phase_durations
from tpwarden.cluster.boot.phase import BootPhase
from tpwarden.cluster.boot.progress import BootProgress, BootTracker
from tpwarden.cluster.containers.gateway import LogStream
from tpwarden.cluster.containers.info import ContainerInfo
from tpwarden.cluster.control.logs import last_log_lines
from tpwarden.cluster.control.nodes import Nodes
from tpwarden.cluster.control.results import BootResult, Emit, ServerProbe
from tpwarden.cluster.errors import TpwardenError
from tpwarden.cluster.launch import plan_cluster
from tpwarden.cluster.signals import container_exit
from tpwarden.cluster.spec import ClusterSpec

Observed = Mapping[str, list[ContainerInfo] | TpwardenError]
LAST_LINES = 20  # a failed boot's report shows each node's last lines


class Probe(Protocol):
    """The 1-token probe (`Controller.probe`)."""

    def __call__(self, *, timeout: float) -> ServerProbe: ...


def dead_containers(observed: Observed) -> list[str]:
    """Pure: 'node: container gone/exited (code)' for every answering node whose container is
    not up, the code named when it is a signal's (`container exited (137): SIGKILL, killed,
    often by the kernel's out-of-memory killer`). A node that did not answer is not counted: it
    says nothing about its container."""
    dead = []
    for name, r in observed.items():
        if isinstance(r, TpwardenError):
            continue
        if not r:
            dead.append(f"{name}: container gone")
        for c in r:
            if c.state in ("exited", "dead"):
                dead.append(f"{name}: {container_exit(c.exit_code, c.oom_killed)}")
    return dead


class BootFollower:
    """The head's boot as its log and the probe show it. `observe()` lists every node's
    serving containers; `probe(timeout=...)` is the 1-token probe; `clock` is wall seconds."""

    def __init__(
        self,
        spec: ClusterSpec,
        nodes: Nodes,
        *,
        history: BootHistory,
        observe: Callable[[], Observed],
        probe: Probe,
        emit: Emit,
        clock: Callable[[], float],
    ) -> None:
        self.spec = spec
        self.nodes = nodes
        self.history = history
        self.observe = observe
        self.probe = probe
        self.emit = emit
        self.clock = clock

    def dead_containers(self) -> list[str]:
        return dead_containers(self.observe())

    def head_container(self) -> ContainerInfo | None:
        """The head's serving container as its engine reports it (any state); None if absent."""
        found = self.nodes.docker(self.spec.head).list_tpwarden(self.spec.name)
        return (
            max(found, key=lambda c: c.started_at or datetime.min.replace(tzinfo=UTC))
            if found
            else None
        )

    def progress(self) -> BootProgress | None:
        """Where the head's current container is in its boot, from its whole log so far (one
        `docker logs` read, no follower); None without a head container. For the watchdog."""
        c = self.head_container()
        if c is None:
            return None
        text = self.nodes.docker(self.spec.head).logs(c.id, tail="all")
        started = c.started_at.timestamp() if c.started_at else None
        tracker = BootTracker(self.history.medians(self.spec.name), started_at=started)
        now = self.clock()
        progress = tracker.feed_lines(re.split(r"[\r\n]+", text), now)
        if c.state in ("exited", "dead") and not progress.failed:
            progress = tracker.fail(f"head {container_exit(c.exit_code, c.oom_killed)}", now)
        return progress

    def follow(self, timeout_s: float = 2400.0, poll_s: float = 0.5) -> BootResult:
        """Follow the head's log through the boot phases until a 1-token completion answers,
        a container exits, the log shows a fatal error, or `timeout_s` passes."""
        head = self.spec.head
        start = self.clock()
        tracker = BootTracker(self.history.medians(self.spec.name), started_at=start)
        lines: queue.Queue[str | None] = queue.Queue()
        gw = self.nodes.docker(head)
        name = plan_cluster(self.spec).for_node(head.name).name
        stream = gw.follow_logs(name, tail="all")
        threading.Thread(
            target=_pump, args=(stream, lines), daemon=True, name="tpwarden-boot-log"
        ).start()
        deadline = time.monotonic() + timeout_s
        next_state_check = next_probe = 0.0
        reason: str | None = None
        try:
            while True:
                now = self.clock()
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
                    late = progress.phase.order >= BootPhase.API_STARTING.order
                    next_probe = mono + (1.0 if late else 5.0)
                    ok = self.probe(timeout=10).ok
                    if ok:
                        progress = tracker.mark_ready(now)
                        ended = self.clock()
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
        progress, reason, last = self._named_failure(tracker.progress, reason or "boot failed")
        self.emit("failed", None, reason, progress)
        return BootResult(False, progress, self.clock() - start, reason, last)

    def _named_failure(
        self, progress: BootProgress, reason: str
    ) -> tuple[BootProgress, str, dict[str, str]]:
        """A failed boot's progress and reason with the server's crash named from every node's
        log (the rank that died by a signal may be another node's: its executor logs the exit
        code the head's did not), and each node's last lines for the report."""
        tails = last_log_lines(self.spec, self.nodes, CRASH_TAIL_LINES)
        crash = cluster_crash(tails, self.spec.head.name, progress.crash)
        progress = with_crash(progress, crash)
        if crash is not None and crash.named:
            reason = crash.describe()
        last = {node: "\n".join(text.splitlines()[-LAST_LINES:]) for node, text in tails.items()}
        return progress, reason, last


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
    except TpwardenError as e:
        q.put(f"tpwarden: log stream error: {e}")
    finally:
        q.put(None)
