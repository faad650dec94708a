"""`tpwarden experiment run PLAN --dry-run` and `tpwarden ledger why --plan FILE` as operations.

* `dry_run`: the plan read and validated (`experiment.plan_file`), each variant checked against
  the inventory as `rollout` would apply it (`experiment.check`), what is left of the queue
  from its results directory (`experiment.resume`), and the queue estimated from the cluster's
  recorded boots (`boots.jsonl`, the worst one) and the ledger's canaries (their worst
  duration) by `experiment.policy`. Reads local files only: no node is contacted, no lock taken.
* `write_revert_plan`: `why`'s report -> the plan that reverts its differences, written
  atomically.

The night itself is `experiment_run`; its guard `experiment_guard`; `experiment show` and
`abort` are `experiment_show` and `experiment_abort`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from tpwarden.cluster.boot.history import BootHistory
from tpwarden.cluster.durable import JSONObject, atomic_write_text, default_state_dir
from tpwarden.cluster.errors import ConfigError
from tpwarden.cluster.experiment.check import VariantCheck, check_variants
from tpwarden.cluster.experiment.from_why import RevertPlan, revert_plan
from tpwarden.cluster.experiment.plan_file import LoadedPlan, load_plan
from tpwarden.cluster.experiment.policy import (
    QueueEstimate,
    costs_from,
    deadline_of,
    minutes,
    plan_queue,
)
from tpwarden.cluster.experiment.resume import (
    PRODUCTION_START,
    ResumeState,
    result_name,
    resume_state,
)
from tpwarden.cluster.inventory.load import load_inventory
from tpwarden.cluster.ledger.record import ledger_file
from tpwarden.cluster.ledger.store import Ledger
from tpwarden.cluster.ledger.why import WhyReport
from tpwarden.cluster.report_settings import clock_time, zone
from tpwarden.cluster.spec import ClusterSpec

RECENT_CANARIES = 20


def results_dir(cluster: str, plan: Path, state_dir: Path | None = None) -> Path:
    """`<state>/experiment/<cluster>/<plan file's stem>`: one file per finished variant."""
    return (state_dir or default_state_dir()) / "experiment" / cluster / plan.stem


@dataclass(frozen=True)
class DryRun:
    plan: LoadedPlan
    variants: tuple[VariantCheck, ...]
    resume: ResumeState
    queue: QueueEstimate
    tz: str
    results: Path
    refused: str | None  # why the plan is refused (passes its deadline without --allow-partial)

    def to_json(self) -> JSONObject:
        return {
            "plan": self.plan.path, "tz": self.tz, "results_dir": str(self.results),
            "restore_by": self.plan.plan.restore_by, "refused": self.refused,
            "variants": [v.to_json() for v in self.variants], "resume": self.resume.to_json(),
            "queue": self.queue.to_json(),
        }  # fmt: skip


def dry_run(
    plan_path: Path,
    inventory: Path,
    *,
    allow_partial: bool = False,
    now: float | None = None,
    state_dir: Path | None = None,
    deadline: float | None = None,
) -> DryRun:
    """Everything `experiment run` would do, estimated; nothing changed, no node contacted.
    ``deadline`` (epoch seconds): a resumed night's own, kept from its run record."""
    # the image's flag table is required, as `plan` requires it: a variant's extra_args are
    # checked against it (`check`), never left unchecked
    spec = load_inventory(inventory, flag_table=True)
    loaded = load_plan(plan_path)
    checks = tuple(check_variants(loaded, str(inventory), spec))
    results = results_dir(spec.name, plan_path, state_dir)
    names = [v.name for v in checks]
    files = [p.name for p in results.iterdir()] if results.is_dir() else []
    state = resume_state(names, files)
    left = [(v.name, v.restarts) for v in checks if v.name in state.left]
    plan = loaded.plan
    tz = plan.tz or spec.report.tz
    at = time.time() if now is None else now
    if deadline is None:
        deadline = deadline_of(
            plan.restore_by, zone(tz), datetime.fromtimestamp(at, UTC)
        ).timestamp()
    costs = costs_from(
        recorded_boots(spec, state_dir), _canaries(spec),
        boot_deadline_s=spec.watchdog.boot_deadline_s, bench=plan.bench,
        eval_preset=plan.eval.preset if plan.eval else None,
        eval_limit=plan.eval.limit if plan.eval else None, margin_s=60.0 * plan.margin_min,
    )  # fmt: skip
    measured = result_name(PRODUCTION_START) in files  # a resumed queue: opened already
    queue = plan_queue(left, costs, at, deadline, measured=measured)
    refused = None
    if not queue.fits and not allow_partial:
        time_left = max(queue.deadline - at, 0.0)
        refused = (f"the whole queue needs {minutes(queue.whole_s)} and a margin of "
                   f"{minutes(costs.margin_s)}, {minutes(time_left)} left until the deadline "
                   f"({queue.verdict()}: {len(queue.skipped)} variant(s) would be skipped)")  # fmt: skip
    return DryRun(loaded, checks, state, queue, tz, results, refused)


def new_deadline(plan_path: Path, spec: ClusterSpec, restore_by: str, now: float) -> float:
    """A resumed night's new deadline (`--restore-by`, read as the plan's `restore_by` is, in
    the plan's zone); bad input exits 2 naming the option."""
    plan = load_plan(plan_path).plan
    try:
        clock_time(restore_by.removeprefix("+").zfill(5))
        at = deadline_of(
            restore_by, zone(plan.tz or spec.report.tz), datetime.fromtimestamp(now, UTC)
        )
    except ValueError as exc:
        raise ConfigError(str(exc), key="--restore-by",
                          hint='a local time "06:30" or a duration from now "+02:00"') from None  # fmt: skip
    return at.timestamp()


def refusal(run: DryRun) -> ConfigError:
    """The refusal of a plan whose estimate passes its deadline (exit 2)."""
    return ConfigError(
        run.refused or "", file=run.plan.path, line=run.plan.line(("restore_by",)),
        key="restore_by", hint="move restore_by later, drop variants, or run with --allow-partial",
    )  # fmt: skip


def recorded_boots(spec: ClusterSpec, state_dir: Path | None = None) -> list[float]:
    """The cluster's recorded boots (seconds), as cluster control writes them."""
    history = BootHistory((state_dir or default_state_dir()) / "boots.jsonl")
    out = []
    for rec in history.records(spec.name):
        total = rec.get("total_s")
        if isinstance(total, (int, float)):
            out.append(float(total))
    return out


def _canaries(spec: ClusterSpec) -> list[float]:
    """The recent completed canaries' durations from the ledger (none when there is no ledger)."""
    path = ledger_file(spec)
    if not path.exists():
        return []
    with Ledger.open(path, readonly=True) as led:
        rows = led.canaries(spec.name, status="ok", limit=RECENT_CANARIES)
    return [c.finished - c.started for c in rows if c.finished is not None]


def write_revert_plan(report: WhyReport, out: Path, restore_by: str = "06:30") -> RevertPlan:
    """The plan that reverts `report`'s differences, written to `out` (atomically)."""
    plan = revert_plan(report, restore_by)
    atomic_write_text(out, plan.text, mode=0o644)
    return plan
