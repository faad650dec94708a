"""What a rollout measures and how it tells a failed restart: the benchmark sweep (`measure`) and
the cluster's own words for a restart that did not come up. The ports that restart and hold are
the rollout operation's (`tpwarden.cluster.operations.rollout`)."""

from __future__ import annotations

import time
from collections.abc import Callable

from tpwarden.cluster.bench.plan import BenchOptions
from tpwarden.cluster.bench.runner import BenchRunner
from tpwarden.cluster.boot.phase import BootPhase
from tpwarden.cluster.control.controller import Controller
from tpwarden.cluster.control.results import ApplyResult
from tpwarden.cluster.durable import JSONObject
from tpwarden.cluster.rollout.sequence import Measurement
from tpwarden.cluster.spec import ClusterSpec

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
