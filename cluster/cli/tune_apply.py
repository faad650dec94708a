"""`tpwarden tune drafter --apply` (issue 33 item 3): the recommendation through one guarded
rollout, the one `tpwarden rollout --set drafter.num_speculative_tokens=K` runs (pre-flight,
watchdog held, restart, 1-token probe, the same sweep after, guards, keep or roll back), with the
tune sweep itself as the rollout's "before"; then the prediction judged against what was
measured, kept in the run's `tune.json` (`applied`). Wiring and rendering only: the rules are in
`cluster.tune.apply`, the sequence in `cluster.rollout`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import typer
from tpwarden.cluster.bench.plan import BenchOptions
from tpwarden.cluster.bench.runner import BenchRun
from tpwarden.cluster.cli.common import console, err_console
from tpwarden.cluster.cli.rollout_view import progress, render_record
from tpwarden.cluster.durable import JSONObject, JSONValue
from tpwarden.cluster.errors import ConfigError
from tpwarden.cluster.operations.rollout import ports_for, rollout_locks, rollout_store
from tpwarden.cluster.rollout.edit import Guard, parse_set
from tpwarden.cluster.rollout.sequence import TERMINAL, Rollout
from tpwarden.cluster.spec import ClusterSpec
from tpwarden.cluster.tune.apply import (
    GUARD_SLACK_PCT,
    applied_doc,
    change_for,
    default_guards,
    not_applied,
)
from tpwarden.cluster.tune.history import applied_lines
from tpwarden.cluster.tune.model import Prediction, Recommendation
from tpwarden.cluster.tune.runner import SweepMeasurer, as_measurement, level_json

APPLY_STEPS = (
    "sweep at the current k (this run; it is also the rollout's 'before')",
    "predict every k' and recommend one for the profile; stop when it is the current k",
    "pre-flight the new config, hold the watchdog",
    "write the inventory (drafter.num_speculative_tokens=K, drafter=null for K=0), restart, "
    "1-token probe",
    "sweep again at the same levels ('after'), check the guards",
    "keep, or roll back to the old revision; record predicted vs measured in tune.json",
)
DEFAULT_GUARDS = (
    "one per weighted profile level: c=N aggregate >= min(predicted low change, 0%) - "
    f"{GUARD_SLACK_PCT:g}%"
)
# the rollout's steps that leave the server on a config the operator chose
OK_STEPS = ("done", "not_needed")


def refuse_conflicts(*, from_run: bool, as_json: bool, yes: bool, dry_run: bool) -> None:
    """Before anything is read or contacted: what --apply cannot be combined with."""
    if from_run:
        raise ConfigError(
            "--apply changes the server it measured: not with --from-run (a saved run)",
            key="--apply",
            hint="tpwarden tune drafter -i INVENTORY --apply (it sweeps at the current k first)",
        )
    if as_json and not (yes or dry_run):
        raise ConfigError(
            "tune drafter --apply --json asks nothing", key="--json", hint="add --yes"
        )


def current_k(spec: ClusterSpec) -> int:
    drafter = spec.serving.drafter
    if drafter is None:
        raise ConfigError(
            "the inventory runs no drafter: no draft length to tune",
            key="drafter",
            hint="switch one on with tpwarden rollout --set drafter={...}",
        )
    return int(drafter.num_speculative_tokens)


@contextlib.contextmanager
def locked(inventory: Path) -> Iterator[None]:
    """The rollout lock and the cluster lock from before the sweep to the end of the rollout
    (no restart in between changes what was measured); an interrupted rollout is refused
    before anything is measured."""
    with rollout_locks(inventory, "tpwarden tune drafter --apply"):
        current = rollout_store(inventory).current()
        if current and current.step not in TERMINAL:
            raise ConfigError(
                f"rollout {current.id} was interrupted at '{current.step}'",
                hint="finish it with tpwarden rollout --resume (or --abort) first",
            )
        yield


def dry_run_plan(
    spec: ClusterSpec,
    inventory: Path,
    levels: Sequence[int],
    guards: Sequence[Guard],
    k_max: int | None,
) -> JSONObject:
    """What --apply would do; the k it rolls out to is only known after the sweep."""
    k = current_k(spec)
    return {
        "current_k": k,
        "candidates": list(range((k if k_max is None else k_max) + 1)),
        "change": "drafter.num_speculative_tokens=K (drafter=null for K=0), K the recommendation",
        "levels": list(levels),
        "guards": [str(g) for g in guards] or [DEFAULT_GUARDS],
        "via": "direct",
        "steps": list(APPLY_STEPS),
        "rollout_state": str(rollout_store(inventory).root),
    }


def print_plan(plan: Mapping[str, JSONValue]) -> None:
    console.print(
        f"then --apply: from k={plan['current_k']} to the recommended k' of "
        f"{plan['candidates'][0]}..{plan['candidates'][-1]}, measured at c="
        f"{','.join(map(str, plan['levels']))}; guards: {'; '.join(plan['guards'])}",
        highlight=False,
        markup=False,
    )
    for i, step in enumerate(plan["steps"], 1):
        console.print(f"  {i}. {step}", highlight=False, markup=False)


@dataclass(frozen=True)
class ApplyInput:
    inventory: Path
    spec: ClusterSpec
    run: BenchRun  # the tune sweep: the rollout's baseline
    opts: BenchOptions  # the sweep's options: the rollout measures with the same
    runs_dir: Path | None
    preds: Sequence[Prediction]
    rec: Recommendation
    profile: Mapping[int, float]
    guards: Sequence[Guard]  # the operator's; empty: default_guards
    yes: bool
    as_json: bool


def apply_recommendation(a: ApplyInput) -> JSONObject:
    """Roll out the recommendation (or say why not); the `applied` section of tune.json."""
    out = err_console if a.as_json else console
    if a.rec.k == a.rec.k_ref:
        out.print(f"recommended k = current k = {a.rec.k}: nothing to apply", highlight=False)
        return not_applied(a.rec, "not_needed", "the recommendation is the current k")
    guards = list(a.guards) or default_guards(a.preds, a.rec, a.profile)
    measurer = SweepMeasurer(a.opts, a.runs_dir, on_progress=lambda m: err_console.print(m))
    ports = ports_for(a.inventory, measurer, "direct", progress(a.as_json))
    ro = Rollout(rollout_store(a.inventory), ports)
    record = ro.prepare(str(a.inventory), [parse_set(change_for(a.rec.k))], guards)
    for line in record.summary:
        out.print(f"change: {line}", highlight=False, markup=False)
    out.print(
        f"config {record.old_hash} -> {record.new_hash}; guards: {', '.join(record.guards)}",
        highlight=False,
        markup=False,
    )
    if not a.yes and not typer.confirm(f"restart the whole server at k={a.rec.k}?"):
        return not_applied(a.rec, "declined", "the operator declined the restart")
    done = ro.run(record, guards, baseline=as_measurement(a.run, a.spec))
    if not a.as_json:
        render_record(done)
    after = [level_json(lv) for lv in measurer.levels] if measurer.levels else None
    return applied_doc(done.__dict__, a.preds, a.rec, a.profile, after)


def print_applied(doc: Mapping[str, JSONValue], title: str) -> None:
    """The predicted-vs-measured lines of a tune.json with an `applied` section."""
    lines = applied_lines(doc)
    if not lines:
        return
    console.print(f"{title}: {lines[0]}", highlight=False, markup=False)
    for line in lines[1:]:
        console.print(f"  {line}", highlight=False, markup=False)
    ap = doc.get("applied") or {}
    if ap.get("after_run_dir"):
        console.print(
            f"  the sweep at k={ap.get('to_k')}: {ap['after_run_dir']} (as --history it gives "
            "the step fit a second k)",
            highlight=False,
            markup=False,
        )
