"""`tpwarden tune drafter`: measure at the current draft length, predict every k', recommend one
per load profile, and with --apply prove it with one guarded rollout (issue 33; the model is
docs/tune.md). Rendering only; the work is in cluster.tune, the rollout in cli.tune_apply.

tpwarden tune drafter -i inventory.yml --levels 1,8,32 --profile c1:0.2,c8:0.5,c32:0.3
tpwarden tune drafter -i inventory.yml --profile c1:0.2,c8:0.5,c32:0.3 --apply --plot k.png
tpwarden tune drafter --from-run runs/20260101T000000Z-sweep --profile c32:1 --json
tpwarden tune drafter -i inventory.yml --dataset field-prompts.jsonl --profile c1:0.2,c32:0.8
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated

import typer
from tpwarden.cluster.bench.dataset import read_prompts
from tpwarden.cluster.bench.plan import DEFAULT_PROMPTS, BenchError, BenchOptions, client_plan
from tpwarden.cluster.bench.runner import default_runs_dir, load_run
from tpwarden.cluster.cli.common import console, emit_json, err_console, handle_errors, load
from tpwarden.cluster.cli.inputs import check_output_path
from tpwarden.cluster.cli.options import DEFAULT_INVENTORY, InventoryOption, JsonOption
from tpwarden.cluster.cli.tune_apply import (
    OK_STEPS,
    ApplyInput,
    apply_recommendation,
    current_k,
    dry_run_plan,
    locked,
    print_applied,
    print_plan,
    refuse_conflicts,
)
from tpwarden.cluster.cli.tune_view import print_dataset, render_table, write_plot
from tpwarden.cluster.control.controller import Controller
from tpwarden.cluster.durable import JSONObject
from tpwarden.cluster.errors import ConfigError
from tpwarden.cluster.rollout.edit import Guard, parse_guard
from tpwarden.cluster.settings import BENCH_OUTPUT_LEN
from tpwarden.cluster.spec import ClusterSpec
from tpwarden.cluster.tune.acceptance import DraftCounts
from tpwarden.cluster.tune.history import history_points, last_applied
from tpwarden.cluster.tune.model import (
    LevelMeasure,
    Prediction,
    Recommendation,
    fit,
    parse_profile,
    predict,
    recommend,
)
from tpwarden.cluster.tune.runner import RecordingRunner, level_json, measure, save, tune_docs
from tpwarden.cluster.tune.steptime import StepModel, StepPoint

app = typer.Typer(help="Choose the drafter's draft length from measurement.", no_args_is_help=True)


def _levels(text: str) -> tuple[int, ...]:
    try:
        levels = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        levels = ()
    if not levels or min(levels) < 1:
        raise typer.BadParameter(f"{text!r}: a comma list such as 1,8,32", param_hint="--levels")
    return levels


def _profile(text: str | None, levels: tuple[int, ...]) -> dict[int, float]:
    if text is None:
        return {c: 1.0 / len(levels) for c in levels}
    try:
        prof = parse_profile(text)
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--profile") from None
    missing = sorted(set(prof) - set(levels))
    if missing:
        raise typer.BadParameter(
            f"levels {missing} are not measured ({','.join(map(str, levels))})",
            param_hint="--profile",
        )
    return prof


def _history(paths: list[Path]) -> list[StepPoint]:
    points: list[StepPoint] = []
    for p in paths:
        manifest, table = load_run(p)
        points += history_points(manifest, table)
    return points


def _from_run(path: Path) -> tuple[list[LevelMeasure], JSONObject]:
    try:
        doc = json.loads((path / "tune.json").read_text())
    except FileNotFoundError:
        raise BenchError(f"{path}: no tune.json (not a `tune drafter` run)") from None
    levels = [
        LevelMeasure(
            d["concurrency"],
            DraftCounts(d["drafts"], tuple(d["accepted_per_pos"]), d["draft_tokens"]),
            d["itl_p50_ms"],
            d["aggregate_tok_s"],
        )
        for d in doc["levels"]
    ]
    return levels, doc


def _doc(
    levels: list[LevelMeasure],
    profile: dict[int, float],
    history: list[StepPoint],
    model: StepModel,
    preds: list[Prediction],
    rec: Recommendation,
    source: str,
) -> JSONObject:
    return {
        "source": source,
        "measured_k": levels[0].counts.k,
        "profile": {f"c{c}": w for c, w in profile.items()},
        "levels": [level_json(lv) for lv in levels],
        "history_points": [asdict(p) for p in history],
        "step_model": asdict(model),
        "predictions": [p.to_json() for p in preds],
        "recommendation": rec.to_json(),
    }


def _check_k_max(k_max: int | None, k: int) -> None:
    """The measured k is the reference every k' is scored against: it is always predicted."""
    if k_max is not None and k_max < k:
        raise ConfigError(
            f"--k-max {k_max} is below the measured k={k}",
            key="--k-max",
            hint=f"give {k} or more (k' from 0 to --k-max are predicted)",
        )


@dataclass(frozen=True)
class Analysis:
    levels: list[LevelMeasure]
    model: StepModel
    preds: list[Prediction]
    rec: Recommendation
    doc: JSONObject


def _analyse(
    levels: list[LevelMeasure],
    profile: dict[int, float],
    past: list[StepPoint],
    k_max: int | None,
    source: str,
) -> Analysis:
    _check_k_max(k_max, levels[0].counts.k)
    model = fit(levels, past)
    preds = predict(levels, model, k_max)
    rec = recommend(preds, profile, k_ref=levels[0].counts.k)
    return Analysis(
        levels, model, preds, rec, _doc(levels, profile, past, model, preds, rec, source)
    )


def _last_applied(runs_dir: Path | None, own: str) -> JSONObject | None:
    """The latest earlier tune run whose recommendation was rolled out (not this run)."""
    runs = runs_dir or default_runs_dir()
    mine = Path(own).resolve()
    docs = [(rid, d) for rid, d in tune_docs(runs) if (runs / rid).resolve() != mine]
    last = last_applied(docs)
    return None if last is None else {"run_id": last[0], **last[1]}


def _finish(a: Analysis, as_json: bool, plot: Path | None, runs_dir: Path | None) -> None:
    """Plot, the last applied run's prediction against its measurement, the JSON document, and
    exit 1 when a rollout did not keep the recommendation."""
    if plot is not None:
        write_plot(plot, a.levels, a.preds, a.rec, a.doc.get("applied"))
    past = _last_applied(runs_dir, a.doc["source"])
    applied = a.doc.get("applied")
    ok = applied is None or applied.get("step") in OK_STEPS
    if as_json:
        emit_json("tune drafter", {"ok": ok, **a.doc, "last_applied": past})
    else:
        if applied:
            print_applied(a.doc, "this run")
        if past:
            print_applied(past, f"last applied ({past['run_id']})")
        if plot is not None:
            console.print(f"plot: {plot}", highlight=False, markup=False)
    if not ok:
        raise typer.Exit(1)


def _dry_run(
    spec: ClusterSpec, opts: BenchOptions, plan: JSONObject | None, as_json: bool,
    dataset: JSONObject,
) -> None:  # fmt: skip
    lv = opts.levels
    containers = [client_plan(spec, opts, c, i, "dry-run").to_json() for i, c in enumerate(lv)]
    if as_json:
        doc = {"ok": True, "dry_run": True, "dataset": dataset, "containers": containers}
        emit_json("tune drafter", {**doc, "apply": plan})
        return
    for c in containers:
        console.print(" ".join(c.get("command") or []), highlight=False, markup=False)
    if plan is not None:
        print_plan(plan)


def _check_options(
    apply: bool, from_run: bool, guard: list[str], yes: bool, dry_run: bool, as_json: bool
) -> None:
    if apply:
        refuse_conflicts(from_run=from_run, as_json=as_json, yes=yes, dry_run=dry_run)
    elif guard or yes:
        raise ConfigError("--guard and --yes go with --apply", key="--guard" if guard else "--yes")


@app.command("drafter")
@handle_errors
def drafter(
    inventory: InventoryOption = DEFAULT_INVENTORY,
    levels: Annotated[str, typer.Option(help="Concurrency levels to measure.")] = "1,8,32",
    profile: Annotated[
        str | None,
        typer.Option(help="Load profile, e.g. c1:0.2,c8:0.5,c32:0.3 (default: levels equal)."),
    ] = None,
    history: Annotated[
        list[Path] | None,
        typer.Option("--history", help="Earlier sweep run directory at another k (repeatable)."),
    ] = None,
    k_max: Annotated[
        int | None, typer.Option(min=0, help="Largest k' to predict (default: the measured k).")
    ] = None,
    from_run: Annotated[
        Path | None,
        typer.Option(
            "--from-run", help="Predict from an earlier tune run's tune.json; run nothing."
        ),
    ] = None,
    apply: Annotated[
        bool,
        typer.Option(
            "--apply",
            help="Roll the recommendation out (guarded rollout, kept or rolled back) and record "
            "predicted against measured.",
        ),
    ] = False,
    guard: Annotated[
        list[str] | None,
        typer.Option(
            "--guard", help="With --apply: keep only if e.g. 'c=32 aggregate >= -5%' (repeatable)."
        ),
    ] = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="With --apply: do not ask.")] = False,
    plot: Annotated[
        Path | None,
        typer.Option("--plot", help="Write a PNG of the predictions here."),
    ] = None,
    dataset: Annotated[
        Path | None,
        typer.Option(
            "--dataset",
            help='Measure with the operator\'s own prompts: JSONL (a "prompt" or chat '
            '"messages" per line) or ShareGPT JSON, as `vllm bench serve` reads them (default: '
            "the built-in Korean prose set).",
        ),
    ] = None,
    num_prompts: Annotated[int, typer.Option(min=1, help="Requests per level.")] = 20,
    output_len: Annotated[
        int, typer.Option(min=1, help="Output tokens per request.")
    ] = BENCH_OUTPUT_LEN,
    client_image: Annotated[str | None, typer.Option(help="Bench client image.")] = None,
    runs_dir: Annotated[Path | None, typer.Option(help="Where run directories go.")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the plan; run none.")] = False,
    as_json: JsonOption = False,
) -> None:
    """Sweep at the current k, record per-position acceptance per level, predict tokens per
    step, step time and throughput for every k' from 0 (no drafter) up, and recommend the k'
    that maximises the profile's weighted gain. With --apply, roll the recommendation out
    through the guarded rollout (tpwarden rollout) and report predicted against measured.

    Example: tpwarden tune drafter -i inventory.yml --levels 1,8,32 --profile c1:0.2,c8:0.5,c32:0.3
    """
    _check_options(apply, from_run is not None, guard or [], yes, dry_run, as_json)
    if dataset is not None and from_run is not None:
        raise ConfigError(
            "--dataset measures anew; --from-run reads a run measured with its own prompts",
            key="--dataset",
        )
    prompt_set = read_prompts(dataset or DEFAULT_PROMPTS)  # a bad file: refused before the sweep
    guards = [parse_guard(g) for g in guard or []]
    lv = _levels(levels)
    past = _history(history or [])
    if from_run is not None:
        measured, saved = _from_run(from_run)
        prof = _profile(profile, tuple(m.concurrency for m in measured))
        a = _analyse(measured, prof, past, k_max, str(from_run))
        if saved.get("applied"):
            a.doc["applied"] = saved["applied"]
        if saved.get("dataset"):
            a.doc["dataset"] = saved["dataset"]
        if not as_json:
            if saved.get("dataset"):
                print_dataset(saved["dataset"], None)
            render_table(a.levels, a.model, a.preds, a.rec)
        _finish(a, as_json, plot, runs_dir)
        return
    prof = _profile(profile, lv)
    opts = BenchOptions(
        kind="sweep",
        levels=lv,
        prompts=dataset or DEFAULT_PROMPTS,
        output_len=output_len,
        num_prompts=num_prompts,
        client_image=client_image,
    )
    if plot is not None:  # before the sweep: a plot that cannot be written is refused first
        check_output_path(plot, "--plot")
    spec = load(inventory)
    if spec.serving.drafter is not None:  # refused before the sweep, not after it
        _check_k_max(k_max, spec.serving.drafter.num_speculative_tokens)
    if not as_json:
        print_dataset(prompt_set.to_json(output_len), num_prompts)
    if dry_run:
        plan = dry_run_plan(spec, inventory, lv, guards, k_max) if apply else None
        _dry_run(spec, opts, plan, as_json, prompt_set.to_json(output_len))
        return
    a = _live(
        inventory, spec, opts, prof, past, k_max, runs_dir, guards if apply else None, yes, as_json
    )
    _finish(a, as_json, plot, runs_dir)


def _live(
    inventory: Path,
    spec: ClusterSpec,
    opts: BenchOptions,
    prof: dict[int, float],
    past: list[StepPoint],
    k_max: int | None,
    runs_dir: Path | None,
    guards: list[Guard] | None,  # None: no --apply
    yes: bool,
    as_json: bool,
) -> Analysis:
    """Sweep, predict, save tune.json, show the table; with --apply (guards not None) the
    rollout, all under the rollout and cluster locks."""
    with contextlib.ExitStack() as stack:
        if guards is not None:
            current_k(spec)  # no drafter in the inventory: refused before the locks
            stack.enter_context(locked(inventory))
        with Controller(spec) as ctl:
            runner = RecordingRunner(ctl, runs_dir, on_progress=lambda m: err_console.print(m))
            run, measured = measure(runner, opts, runner.preflight())
        a = _analyse(measured, prof, past, k_max, str(run.dir))
        a.doc["dataset"] = read_prompts(opts.prompts).to_json(opts.output_len)
        save(run.dir, a.doc)
        if not as_json:
            render_table(a.levels, a.model, a.preds, a.rec)
        if guards is None:
            return a
        if a.rec.k_ref != current_k(spec):
            raise ConfigError(
                f"the server runs k={a.rec.k_ref}, the inventory says k={current_k(spec)}",
                key="drafter.num_speculative_tokens",
                hint="restart on the inventory (tpwarden restart) and tune again",
            )
        a.doc["applied"] = apply_recommendation(
            ApplyInput(inventory, spec, run, opts, runs_dir, a.preds, a.rec, prof, guards, yes,
                       as_json)
        )  # fmt: skip
        save(run.dir, a.doc)
        return a
