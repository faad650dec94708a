"""The watchdog's real actuator: cluster control (`tpwarden.cluster.control.controller.Controller`).

`ControllerActuator` is the `tpwarden.watchdog.daemon.Actuator` the daemon is given by
injection (`build_actuator` is the one place that binds the watchdog to cluster control). A
restart is run as a detached child process, the restart job (`tpwarden.watchdog.restart_job`),
that reports one JSON line; `result_doc` and `raise_unless_applied` are the two ends of that
contract.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Mapping
from typing import Literal, Protocol

from tpwarden.cluster.boot.progress import BootProgress
from tpwarden.cluster.control.controller import Controller
from tpwarden.cluster.control.results import ApplyResult
from tpwarden.cluster.durable import JSONObject
from tpwarden.cluster.errors import ProbeError, TpwardenError
from tpwarden.cluster.operations.control import WATCHDOG, restart
from tpwarden.cluster.reports.incident import capture
from tpwarden.cluster.spec import ClusterSpec
from tpwarden.cluster.ssh.identity import SshIdentity
from tpwarden.watchdog.observation import BootReading
from tpwarden.watchdog.runtime import RestartJobOverdue

RESTART_JOB_TIMEOUT_S = 1800.0  # waiting for the restart job (removal + starts, not the boot)
EVIDENCE_LOG_LINES = 50
EVIDENCE_MAX_CHARS = 8000  # per node, and for the /metrics snapshot
WATCHDOG_WHO = "tpwarden-watchdog"  # `who` of the watchdog's restarts in events.jsonl
RESTART_JOB_MODULE = "tpwarden.watchdog.restart_job"  # run as `python -m RESTART_JOB_MODULE`


class Spawn(Protocol):
    """How the restart job is started: `subprocess.Popen` (tests inject a fake)."""

    def __call__(
        self,
        args: list[str],
        *,
        stdin: int,
        stdout: int,
        stderr: int,
        start_new_session: bool,
        text: Literal[True],
        pass_fds: tuple[int, ...],
    ) -> subprocess.Popen[str]: ...


class ControllerActuator:
    """`tpwarden.watchdog.daemon.Actuator` over `tpwarden.cluster.control.controller.Controller`.

    * `restart()` is exactly an operator's `tpwarden restart --no-wait`: the one restart
      operation (same plan, same `events.jsonl` record, who=tpwarden-watchdog), run in a detached child
      process (its own session) that this one waits for. A daemon killed with -9 mid-restart
      therefore never leaves a half-applied plan: the job finishes the restart, and the next
      daemon finds `restart_in_progress` and only verifies it in boot grace. The job holds the
      cluster restart lock with the daemon (its descriptor, `keep_fds`), so until the job ends
      the next daemon reads its stopped containers as a restart elsewhere, not a failed boot.
    * `boot_progress()` reads the head's container log (`Controller.boot_progress()`) and gives
      the policy a `BootReading` (`boot_reading`).
    * `collect_evidence()`: last log lines of every node and a `/metrics` snapshot.
    * `collect_dossier(reason)`: which rank hung, and where (`tpwarden.cluster.reports.incident`,
      bounded to 10 s for all nodes); the daemon stores it with the restart.
    * `server_started_at()`: when the head's container started (fencing: a restart made by
      someone else since the failures began is not repeated).
    """

    def __init__(
        self,
        spec: ClusterSpec,
        control_state_dir: str | None = None,
        applied_path: str | None = None,
        identity: SshIdentity = SshIdentity(),
        *,
        controller: Controller | None = None,
        spawn: Spawn | None = None,
    ) -> None:
        self.spec = identity.apply(spec)
        self.control_state_dir = control_state_dir
        self.applied_path = applied_path  # the plan a restart replays (not the inventory)
        self.identity = identity  # this host's SSH key and known_hosts, for the restart job too
        self.controller = controller or Controller(
            self.spec, state_dir=control_state_dir, node_timeout_s=10.0
        )
        self._spawn = spawn  # None: subprocess.Popen (looked up when used); tests inject

    def restart_job_argv(self, why: str) -> list[str] | None:
        """The restart job's command line; None when there is no file to hand it (a spec built
        in memory), and the restart runs in this process instead."""
        source = getattr(self.spec, "source_file", None)
        if self.applied_path and os.path.isfile(self.applied_path):
            source = self.applied_path
        if not source or not os.path.isfile(source):
            return None
        argv = [sys.executable, "-m", RESTART_JOB_MODULE, source, why]
        if self.control_state_dir:
            argv.append(str(self.control_state_dir))
        return argv + self.identity.argv()  # the plan is the control machine's; the key is ours

    def restart(self, reason: str, evidence: JSONObject, keep_fds: tuple[int, ...] = ()) -> None:
        """The restart job, waited for; `keep_fds` (the cluster restart lock's descriptor) stay
        open in the job, so the lock is held until the job ends even if this daemon dies."""
        why = f"watchdog: {reason}"
        argv = self.restart_job_argv(why)
        if argv is None:
            result = restart(
                self.controller, why, actor=WATCHDOG, who=WATCHDOG_WHO, wait_ready=False
            ).result
            raise_unless_applied(result_doc(result, self.spec))
            return
        proc = (self._spawn or subprocess.Popen)(
            outside_this_unit(argv, os.environ, shutil.which("systemd-run")),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # survives a kill -9 of this daemon (and its signals)
            text=True,
            pass_fds=keep_fds,
        )
        try:
            out, err = proc.communicate(timeout=RESTART_JOB_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            # Still applying: the caller keeps the cluster restart lock until it really ends.
            raise RestartJobOverdue(
                f"restart job (pid {proc.pid}) still running after {RESTART_JOB_TIMEOUT_S:g}s",
                proc.pid,
                lambda: proc.poll() is None,
            ) from None
        try:
            doc = json.loads(out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise TpwardenError(
                f"restart job exited {proc.returncode} without a result: {err.strip()[-500:]}"
            ) from None
        raise_unless_applied(doc)

    def boot_progress(self) -> BootReading | None:
        """The head's boot progress; failed as soon as any rank's container exited (a worker
        that died leaves the head waiting at the rendezvous until the boot deadline)."""
        progress = self.controller.boot_progress()
        if progress is not None and progress.failed:
            return boot_reading(progress)
        dead = self.controller.dead_containers()
        if dead and any("exited" in d for d in dead):
            return BootReading("exited: " + "; ".join(dead)[:200], 0.0, failed=True)
        return None if progress is None else boot_reading(progress)

    def server_started_at(self) -> float | None:
        c = self.controller.head_container()
        return c.started_at.timestamp() if c is not None and c.started_at else None

    def collect_evidence(self) -> JSONObject:
        lines = self.controller.last_log_lines(tail=EVIDENCE_LOG_LINES)
        doc: JSONObject = {"last_log_lines": {k: v[-EVIDENCE_MAX_CHARS:] for k, v in lines.items()}}
        try:
            status_code, page = self.controller.metrics_page(timeout_s=5.0)
        except ProbeError as exc:
            doc["metrics"] = {"error": str(exc)}
            return doc
        # The engine's own series only, without histogram buckets: the evidence stays readable.
        text = "\n".join(
            ln for ln in page.splitlines() if ln.startswith("vllm:") and "_bucket{" not in ln
        )
        doc["metrics"] = {"status_code": status_code, "text": text[:EVIDENCE_MAX_CHARS]}
        return doc

    def collect_dossier(self, reason: str) -> JSONObject:
        return capture(self.spec, self.controller.nodes, reason)

    def close(self) -> None:
        self.controller.close()


def outside_this_unit(
    argv: list[str], env: Mapping[str, str], systemd_run: str | None
) -> list[str]:
    """The restart job's argv, in a transient scope of its own when this daemon is a systemd
    service (issue 29 item 4): stopping or restarting the watchdog unit kills its cgroup
    (KillMode=control-group), and a restart cut short between removal and start would leave
    the server down. A scope is its own cgroup, yet `systemd-run --scope` execs the job itself,
    so it keeps this process's environment (the API key's variable) and stdout (its result).
    Elsewhere (a foreground `watchdog run`, no systemd) the job's own session is enough."""
    if not env.get("INVOCATION_ID") or systemd_run is None:
        return argv
    unit = f"tpwarden-restart-{uuid.uuid4().hex[:12]}"
    return [systemd_run, "--scope", "--quiet", "--collect", f"--unit={unit}",
            "--description=tpwarden watchdog restart job", "--", *argv]  # fmt: skip


def boot_reading(progress: BootProgress) -> BootReading:
    """What the policy needs of a boot: its phase and a counter that only grows, built from
    concrete evidence only (shards and drafter shards loaded, CUDA-graph percent), never from
    the time-based `fraction` or ETA, which grow while a boot is stuck."""
    counter = progress.shards_loaded + progress.drafter_shards_loaded
    counter += progress.cuda_graphs_pct or 0
    return BootReading(progress.phase.value, float(counter), progress.failed)


def result_doc(result: ApplyResult, spec: ClusterSpec) -> JSONObject:
    """ApplyResult -> JSON. `apply()` stops at the first failed wave, so nodes of later waves
    have no outcome at all: a node without an outcome is a failure too, not a silent pass."""
    outcomes = {o.node: {"ok": o.ok, "message": o.message} for o in result.outcomes}
    missing = [n.name for n in spec.nodes if n.name not in outcomes]
    return {
        "ok": bool(result.ok) and not missing,
        "config_hash": result.plan.config_hash,
        "outcomes": outcomes,
        "missing": missing,
    }


def raise_unless_applied(doc: JSONObject) -> None:
    """TpwardenError naming every node that failed, unless the restart job's `doc` says ok."""
    if doc.get("ok"):
        return
    if doc.get("error"):
        raise TpwardenError(f"restart failed: {doc['error']}")
    bad = [f"{n}: {o['message']}" for n, o in doc.get("outcomes", {}).items() if not o["ok"]]
    bad += [f"{n}: not started (an earlier wave failed)" for n in doc.get("missing", [])]
    raise TpwardenError("restart failed on " + "; ".join(bad))


def build_actuator(
    spec: ClusterSpec,
    control_state_dir: str | None = None,
    applied_path: str | None = None,
    identity: SshIdentity = SshIdentity(),
    *,
    spawn: Spawn | None = None,
) -> ControllerActuator:
    """THE single place that binds the watchdog to cluster control. `control_state_dir`: where
    cluster control keeps events.jsonl/boots.jsonl (default: tpwarden's, as for an operator);
    `applied_path`: the applied plan a restart replays; `identity`: the SSH key and known_hosts
    of the host the watchdog runs on, in place of the plan's (which are the control machine's);
    `spawn`: how the restart job is started (`subprocess.Popen`; tests inject a fake)."""
    return ControllerActuator(spec, control_state_dir, applied_path, identity, spawn=spawn)
