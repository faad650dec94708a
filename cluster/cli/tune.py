"""`tpwarden tune drafter`: measure at the current draft length, predict every k', recommend one
per load profile (issue 33; the model is docs/tune.md). Rendering only; the work is in
cluster.tune.

tpwarden tune drafter -i inventory.yml --levels 1,8,32 --profile c1:0.2,c8:0.5,c32:0.3
tpwarden tune drafter --from-run runs/20260101T000000Z-sweep --profile c32:1 --json
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table
from tpwarden.cluster.bench.plan import DEFAULT_PROMPTS, BenchError, BenchOptions, client_plan
from tpwarden.cluster.bench.runner import load_run
from tpwarden.cluster.cli.common import (
    DEFAULT_INVENTORY,
    InventoryOption,
    JsonOption,
    console,
    emit_json,
    err_console,
    handle_errors,
    load,
)
from tpwarden.cluster.control.controller import Controller
from tpwarden.cluster.tune.acceptance import DraftCounts
from tpwarden.cluster.tune.history import history_points
from tpwarden.cluster.tune.model import (
    LevelMeasure,
    Prediction,
    Recommendation,
    fit,
    parse_profile,
    predict,
    recommend,
)
from tpwarden.cluster.tune.runner import RecordingRunner, level_json, measure, save
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


def _from_run(path: Path) -> tuple[list[LevelMeasure], str]:
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
    return levels, str(path)


def _cell(p: Prediction) -> str:
    mark = "*" if p.measured else ("~" if p.extrapolated else "")
    e = p.tokens_per_step
    return (
        f"{p.aggregate_tok_s:,.1f} ({p.aggregate_lo:,.0f}-{p.aggregate_hi:,.0f}){mark}\n"
        f"{e.mean:.2f}±{1.96 * e.se:.2f} tok/step · {p.step_ms:,.0f} ms"
    )


def _render(
    levels: list[LevelMeasure], model: StepModel, preds: list[Prediction], rec: Recommendation
) -> None:
    conc = [lv.concurrency for lv in levels]
    table = Table(title=f"predicted aggregate tok/s per k' (measured at k={levels[0].counts.k})")
    table.add_column("k'", justify="right")
    for c in conc:
        table.add_column(f"c={c}", justify="right")
    table.add_column("profile score", justify="right")
    by = {(p.k, p.concurrency): p for p in preds}
    for k in sorted({p.k for p in preds}):
        s, lo, hi = rec.scores[k]
        best = " <- best" if k == rec.k else ""
        table.add_row(
            str(k), *(_cell(by[(k, c)]) for c in conc), f"{s:.3f} ({lo:.2f}-{hi:.2f}){best}"
        )
    console.print(table)
    console.print(
        f"step model ({model.source}): {model.a_ms:.1f} ms + {model.b_ms:.3f} ms x verified "
        f"tokens + {model.d_ms:.2f} ms x k; misfit {100 * model.rel_rms:.1f}% "
        "(* measured, ~ extrapolated; bands are 95%)",
        highlight=False,
    )
    for note in model.notes:
        console.print(f"note: {note}", highlight=False)
    sure = "" if rec.distinguishable else f" (within the uncertainty of k={rec.runner_up})"
    console.print(
        f"recommended k = [bold]{rec.k}[/] for this profile: {rec.score:.3f}x the weighted "
        f"throughput of k={rec.k_ref}{sure}",
        highlight=False,
    )
    for why in rec.extrapolated:
        console.print(f"extrapolated: {why}", highlight=False)


def _doc(
    levels: list[LevelMeasure],
    profile: dict[int, float],
    history: list[StepPoint],
    model: StepModel,
    preds: list[Prediction],
    rec: Recommendation,
    source: str,
) -> dict[str, Any]:
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
    num_prompts: Annotated[int, typer.Option(min=1, help="Requests per level.")] = 20,
    output_len: Annotated[int, typer.Option(min=1, help="Output tokens per request.")] = 512,
    client_image: Annotated[str | None, typer.Option(help="Bench client image.")] = None,
    runs_dir: Annotated[Path | None, typer.Option(help="Where run directories go.")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the plan; run none.")] = False,
    as_json: JsonOption = False,
) -> None:
    """Sweep at the current k, record per-position acceptance per level, predict tokens per
    step, step time and throughput for every k' from 0 (no drafter) up, and recommend the k'
    that maximises the profile's weighted gain. Nothing is restarted (no --apply yet).

    Example: tpwarden tune drafter -i inventory.yml --levels 1,8,32 --profile c1:0.2,c8:0.5,c32:0.3
    """
    lv = _levels(levels)
    if from_run is not None:
        measured, source = _from_run(from_run)
        lv = tuple(m.concurrency for m in measured)
    prof = _profile(profile, lv)
    past = _history(history or [])
    if from_run is None:
        opts = BenchOptions(
            kind="sweep",
            levels=lv,
            prompts=DEFAULT_PROMPTS,
            output_len=output_len,
            num_prompts=num_prompts,
            client_image=client_image,
        )
        spec = load(inventory)
        if dry_run:
            plans = [client_plan(spec, opts, c, i, "dry-run").to_json() for i, c in enumerate(lv)]
            if as_json:
                emit_json("tune drafter", {"ok": True, "dry_run": True, "containers": plans})
            else:
                for p in plans:
                    console.print(" ".join(p.get("command") or []), highlight=False)
            return
        with Controller(spec) as ctl:
            runner = RecordingRunner(ctl, runs_dir, on_progress=lambda m: err_console.print(m))
            run, measured = measure(runner, opts, runner.preflight())
        source = str(run.dir)
    model = fit(measured, past)
    preds = predict(measured, model, k_max)
    rec = recommend(preds, prof, k_ref=measured[0].counts.k)
    doc = _doc(measured, prof, past, model, preds, rec, source)
    if from_run is None:
        save(Path(source), doc)
    if as_json:
        emit_json("tune drafter", {"ok": True, **doc})
        return
    _render(measured, model, preds, rec)
