"""The real ports of a rollout: the cluster through `Controller`, the watchdog hold where the
watchdog keeps its state (this machine and/or the head node), and the benchmark."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable

from tpwarden.cluster.bench.plan import BenchOptions
from tpwarden.cluster.bench.runner import BenchRunner
from tpwarden.cluster.boot.phase import BootPhase
from tpwarden.cluster.control.controller import Controller
from tpwarden.cluster.control.results import ApplyResult, ControlEvent
from tpwarden.cluster.durable import JSONObject, atomic_write_json, json_bytes
from tpwarden.cluster.errors import TpwardenError
from tpwarden.cluster.hold import hold_document, hold_path, release_document
from tpwarden.cluster.ledger.record import record_if_healthy
from tpwarden.cluster.rollout.sequence import Measurement, RestartOutcome
from tpwarden.cluster.spec import ClusterSpec

log = logging.getLogger(__name__)


class ControllerCluster:
    """Restart and probe through cluster control: the same plan and event log as an operator's
    `tpwarden restart`, so a rollout restart looks the same in the history."""

    def __init__(
        self, on_event: Callable[[ControlEvent], None] | None = None, who: str = "tpwarden-rollout"
    ):
        self.on_event = on_event
        self.who = who

    def preflight(self, spec: ClusterSpec) -> list[str]:
        """The restart's own pre-flight on `spec` (images, model/drafter paths, GPUs, ports),
        run before the rollout writes the inventory."""
        with Controller(spec) as ctl:
            return list(ctl.preflight(ctl.plan_restart()).problems)

    def restart(self, spec: ClusterSpec, why: str, timeout_s: float) -> RestartOutcome:
        with Controller(spec, on_event=self.on_event) as ctl:
            result = ctl.restart(why, timeout_s=timeout_s, wait_ready=True, who=self.who)
            # LEDGER (issue 53): the operations layer's "healthy" hook, to move there
            record_if_healthy(ctl, result, action="rollout", reason=why, who=self.who)
        return RestartOutcome(result.ok, "" if result.ok else restart_failure(result, timeout_s))

    def probe(self, spec: ClusterSpec) -> tuple[bool, str]:
        with Controller(spec) as ctl:
            ok, latency_ms, error = ctl.probe()
        return ok, f"{latency_ms:.0f} ms" if ok and latency_ms is not None else str(error)

    def stop(self, spec: ClusterSpec, why: str) -> None:
        """`--via watchdog`: take the server down; the watchdog sees it and restarts it."""
        with Controller(spec, on_event=self.on_event) as ctl:
            ctl.events.append({"ts": time.time(), "event": "stop", "who": self.who, "why": why})
            # The watchdog restarts the applied plan: make the new config the one it replays.
            ctl.record_applied("rollout", self.who)
            ctl.down()

    def wait_running(self, spec: ClusterSpec, timeout_s: float, poll_s: float = 2.0) -> bool:
        """Until every node runs `spec`'s config hash and a 1-token completion answers."""
        want = spec.config_hash()
        deadline = time.monotonic() + timeout_s
        with Controller(spec) as ctl:
            while time.monotonic() < deadline:
                st = ctl.status(with_gpus=False)
                if st.ok and all(n.config_hash == want for n in st.nodes):
                    return True
                time.sleep(poll_s)
        return False


class WatchdogHolder:
    """Time-limited hold of the watchdog for the rollout's duration, written where a watchdog
    reads it (`hold.hold_path`, in `hold.hold_document`'s format) on this machine and on the
    head node, wherever the watchdog's state directory exists. Released at the end (or it
    expires on its own)."""

    def __init__(
        self,
        spec: ClusterSpec,
        by: str = "tpwarden-rollout",
        *,
        controller: Callable[[ClusterSpec], Controller] = Controller,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.spec = spec
        self.by = by
        self.path = hold_path(spec.watchdog.state_dir)
        self._controller = controller  # cluster control, to reach the head (tests inject)
        self._clock = clock

    def _write(self, doc: JSONObject) -> None:
        wrote = False
        if os.path.isdir(self.spec.watchdog.state_dir):
            atomic_write_json(self.path, doc)
            wrote = True
        try:
            with self._controller(self.spec) as ctl:
                session = ctl.session(self.spec.head)
                if session.run(["test", "-d", self.spec.watchdog.state_dir]).rc == 0:
                    session.put_atomic(json_bytes(doc), self.path)
                    wrote = True
        except TpwardenError as exc:
            log.warning("could not write the watchdog hold on %s: %s", self.spec.head.name, exc)
        if not wrote:
            log.info(
                "no watchdog state dir %s found; nothing to hold", self.spec.watchdog.state_dir
            )

    def hold(self, reason: str, until: float, kind: str = "hold") -> None:
        self._write(
            hold_document(until=until, reason=reason, by=self.by, now=self._clock(), kind=kind)
        )

    def release(self) -> None:
        self._write(release_document(by=self.by, now=self._clock()))


QUICK_LEVELS = (1, 8, 32)
FULL_LEVELS = (1, 4, 8, 16, 32)
# bench row field -> rollout metric name (the names a --guard uses). Acceptance and tokens per
# step come from the server's spec-decode counters (bench.parse): the field report's k=7 -> k=3
# decision rests on them as much as on tok/s.
ROW_METRICS = (
    ("aggregate", "aggregate_tok_s"),
    ("per_stream", "per_stream_tok_s"),
    ("ttft_p50", "ttft_p50_ms"),
    ("itl_p50", "itl_p50_ms"),
    ("acceptance", "acceptance_pct"),
    ("tokens_per_step", "tokens_per_step"),
)


def measurement_rows(bench_rows: list[JSONObject]) -> dict[int, dict[str, float]]:
    """Bench rows -> {concurrency: {metric: value}}; a metric without a value is left out."""
    return {
        int(row["level"]): {
            metric: float(row[field]) for metric, field in ROW_METRICS if row.get(field) is not None
        }
        for row in bench_rows
    }


def no_measure() -> None:
    return None


def bench_measurer(kind: str, inventory: str) -> Callable[[ClusterSpec, str], Measurement] | None:
    """`--bench none|quick|full` -> a measuring function (None for none)."""
    if kind == "none":
        return None
    # quick = the field report's rollout table: one user, a small team, the full department
    levels = QUICK_LEVELS if kind == "quick" else FULL_LEVELS

    def measure(spec: ClusterSpec, label: str) -> Measurement:
        return sweep_measurement(spec, levels, label)

    return measure


def sweep_measurement(spec: ClusterSpec, levels: tuple[int, ...], label: str) -> Measurement:
    """One `vllm bench serve` sweep from the client container (cluster.bench), as rows."""

    opts = BenchOptions(
        kind="sweep",
        levels=levels,
        num_prompts=spec.bench.num_prompts,
        output_len=spec.bench.output_len,
    )
    with Controller(spec) as ctl:
        run = BenchRunner(ctl).run(opts)
    rows = measurement_rows(run.rows())
    return Measurement(
        rows, run_dir=str(run.dir), config_hash=spec.config_hash(), taken_at=time.time()
    )


def restart_failure(result: ApplyResult, timeout_s: float) -> str:
    """Why a restart failed, in the cluster's words: the node that did not start, the boot's
    verdict with its root cause and when (a crash at 12.7 s is not "not answering in 120 s")."""
    failed = [o for o in result.outcomes if not o.ok]
    if failed:
        return "start failed: " + "; ".join(f"{o.node}: {o.message}" for o in failed)
    boot = result.boot
    if boot is None:
        return "restart failed before the boot"
    phase = boot.progress.phase
    if phase is BootPhase.FAILED:
        cause = boot.reason or boot.progress.error or "no root cause in the log"
        return f"new config failed at boot after {boot.elapsed_s:.1f} s: {cause}"
    return (
        f"new config not answering within {timeout_s:.0f} s "
        f"(boot at {phase.value} after {boot.elapsed_s:.0f} s)"
    )
