"""`tpwarden decide run` and `tpwarden decide calibrate`: batches, run directories, the fit.

Rendering only; the work is in tpwarden.cluster.decide (runner, fitted, plots).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table
from tpwarden.cluster.bench.runner import default_runs_dir, write_json
from tpwarden.cluster.cli.common import console, emit_json, err_console, handle_errors, plain
from tpwarden.cluster.cli.decide_common import (
    DECIDE_DEFAULTS,
    CueOpt,
    DecideArgs,
    KOpt,
    PathOpt,
    RunsDirOpt,
    Setup,
    TimeoutOpt,
    decision_options,
    setup,
)
from tpwarden.cluster.cli.inputs import READABLE_FILE, output_file
from tpwarden.cluster.cli.options import DEFAULT_INVENTORY, InventoryOption, JsonOption
from tpwarden.cluster.decide import fitted as fm
from tpwarden.cluster.decide import plots, runner
from tpwarden.cluster.decide.core import load_items
from tpwarden.cluster.durable import read_jsonl

DataOpt = Annotated[
    Path, typer.Option("--data", **READABLE_FILE, help="JSONL: id, question, choices, answer?")
]
ConcOpt = Annotated[int, typer.Option("--concurrency", "-c", help="Requests in flight.")]


def _fmt(v: Any, fmt: str = "{:.3f}") -> str:
    return "-" if v is None else fmt.format(v)


def _batch(
    ctx: Setup, data: Path, runs: int, concurrency: int, permute: bool, runs_dir: Path | None
) -> tuple[Path, list[dict[str, Any]], dict[str, Any]]:
    """Run the items; write the run directory; return (run_dir, docs, summary)."""

    items = load_items(data)
    opts = runner.RunOptions(
        path=ctx.client.path,
        k=ctx.client.k,
        temperature=ctx.decider.temperature,
        margin_gate=ctx.decider.margin_gate,
        cue=ctx.decider.cue,
        thinking=ctx.client.thinking,
        runs=runs,
        concurrency=concurrency,
        permute=permute,
        calibration_file=ctx.calibration_file,
        data_file=str(data),
        data_sha256=runner.sha256_file(data),
    )
    now = datetime.now(UTC)
    run_id, run_dir = runner.new_run_dir(runs_dir or default_runs_dir(), now)
    manifest = runner.manifest(ctx.spec, opts, run_id, now)
    manifest["calibration"] = None if ctx.fitted is None else ctx.fitted.to_json()
    write_json(run_dir / "manifest.json", manifest)
    with ctx.client:
        result = runner.run_batch(
            ctx.decider, items, opts, on_progress=lambda m: err_console.print(f"[dim]{plain(m)}[/]")
        )
    docs, summary = runner.item_docs(result), runner.summarize(result)
    summary["temperature"], summary["margin_gate"] = opts.temperature, opts.margin_gate
    summary["top_logprobs_k"] = ctx.client.k  # after any 400 "max allowed" correction
    runner.write_results(run_dir, docs, summary)
    manifest["finished_at"] = datetime.now(UTC).isoformat()
    write_json(run_dir / "manifest.json", manifest)
    return run_dir, docs, summary


def _summary_table(s: dict[str, Any], title: str) -> Table:
    t = Table(title=title)
    t.add_column("")
    t.add_column("value", justify="right")
    ci = s.get("accuracy_ci95")
    lat = s["latency_ms"]
    rows = [
        ("items / decided / errors", f"{s['items']} / {s['decided']} / {s['errors']}"),
        ("answered / held", f"{s['answered']} / {s['held']}"),
        ("coverage", _fmt(s["coverage"])),
        ("accuracy (answered)", _fmt(s["accuracy"]) + (f"  CI95 {ci[0]:.3f}-{ci[1]:.3f}" if ci else "")),
        ("accuracy (all decided)", _fmt(s["accuracy_all"])),
        ("flips across runs", "-" if s["flips"] is None else str(s["flips"])),
        ("latency p50 / p95 ms", f"{_fmt(lat['p50'], '{:.0f}')} / {_fmt(lat['p95'], '{:.0f}')}"),
        ("temperature / margin gate", f"{s['temperature']:.3f} / {s['margin_gate']:.3f}"),
    ]  # fmt: skip
    for k, v in rows:
        t.add_row(k, v)
    return t


def _render_run(run_dir: Path, summary: dict[str, Any]) -> None:
    console.print(_summary_table(summary, run_dir.name))
    pos = Table(title="position bias: predicted vs right answer, per label")
    for col in ("label", "predicted", "gold", "acc. when gold"):
        pos.add_column(col, justify="right")
    for r in summary["position"]["table"]:
        pos.add_row(r["label"], str(r["predicted"]), str(r["gold"]), _fmt(r["accuracy_when_gold"]))
    console.print(pos)
    rev = summary["position"].get("reversed_order")
    if rev:
        console.print(
            f"reversed choice order: same choice for {rev['same_choice']}/{rev['items']} "
            f"(consistency {_fmt(rev['consistency'])}); picks by position "
            f"{json.dumps(rev['permuted_picks_by_position'])}",
            highlight=False,
        )
    if summary["flips"] is not None:
        fl = Table(title="flips by margin (mean margin over runs)")
        for col in ("margin", "items", "flips", "flip rate"):
            fl.add_column(col, justify="right")
        for r in summary["flips_by_margin"]:
            fl.add_row(f"{r['margin_lo']:.2f}-{r['margin_hi']:.2f}", str(r["items"]),
                       str(r["flips"]), _fmt(r["flip_rate"]))  # fmt: skip
        console.print(fl)
        for f in summary["flipped"][:20]:
            console.print(f"  flipped {f['id']}: {' -> '.join(f['decisions'])} "
                          f"(min margin {f['min_margin']:.3f})", highlight=False)  # fmt: skip
    console.print(f"run directory: {plain(run_dir)}", highlight=False)


commands = typer.Typer()  # `decide run` and `decide calibrate`, mounted by `cli.decide`


@commands.command("run")
@handle_errors
@decision_options
def run(
    data: DataOpt,
    inventory: InventoryOption = DEFAULT_INVENTORY,
    runs: Annotated[int, typer.Option("--runs", help="Ask every item N times (flips).")] = 1,
    concurrency: ConcOpt = 4,
    permute: Annotated[
        bool, typer.Option("--permute", help="Also ask with the choices reversed (bias).")
    ] = False,
    args: DecideArgs = DECIDE_DEFAULTS,
    runs_dir: RunsDirOpt = None,
    as_json: JsonOption = False,
) -> None:
    """Decide every item of a JSONL file; accuracy, coverage, holds, flips, latency, bias.

    Example: tpwarden decide run -i inventory.yml --data items.jsonl --runs 2 --permute --json
    """
    if runs < 1 or concurrency < 1:
        raise typer.BadParameter("--runs and --concurrency must be >= 1")
    ctx = args.setup(inventory)
    for note in ctx.notes:
        err_console.print(f"[yellow]warning:[/] {plain(note)}", highlight=False)
    run_dir, docs, summary = _batch(ctx, data, runs, concurrency, permute, runs_dir)
    if as_json:
        out = {"ok": summary["decided"] > 0, "run_dir": str(run_dir), "items": docs}
        emit_json("decide run", {**out, "summary": summary}, indent=1)
    else:
        _render_run(run_dir, summary)
    if summary["decided"] == 0:
        err_console.print("[bold red]error:[/] no item got a decision (see items.jsonl)")
        raise typer.Exit(1)


@commands.command("calibrate")
@handle_errors
def calibrate(
    data: Annotated[
        Path | None,
        typer.Option("--data", **READABLE_FILE, help="Labelled validation JSONL (with answers)."),
    ] = None,
    from_run: Annotated[
        Path | None, typer.Option("--from-run", help="Fit on a finished run directory.")
    ] = None,
    inventory: InventoryOption = DEFAULT_INVENTORY,
    target_accuracy: Annotated[
        float, typer.Option(help="Accuracy the answered part must reach (gate).")
    ] = 0.95,
    out: Annotated[
        Path | None, typer.Option("--out", callback=output_file, help="Calibration file to write.")
    ] = None,
    concurrency: ConcOpt = 4,
    path: PathOpt = "completions",
    cue: CueOpt = "Answer:",
    top_logprobs: KOpt = None,
    timeout: TimeoutOpt = 60.0,
    runs_dir: RunsDirOpt = None,
    as_json: JsonOption = False,
) -> None:
    """Fit a temperature (ECE, reliability diagram) and the margin gate for a target
    accuracy (selective-prediction curve); save both for `decide ask/run`.

    Example: tpwarden decide calibrate -i inventory.yml --data validation.jsonl --target-accuracy 0.95
    """

    if (data is None) == (from_run is None):
        raise typer.BadParameter("give exactly one of --data or --from-run")
    if not 0 < target_accuracy <= 1:
        raise typer.BadParameter("--target-accuracy must be in (0, 1]")
    # raw probabilities (T=1) and no gate: the fit must see the model as it is
    ctx = setup(inventory, path, 0.0, 1.0, None, True, cue, top_logprobs, False, timeout)
    if data is not None:
        run_dir, docs, _ = _batch(ctx, data, 1, concurrency, False, runs_dir)
    else:
        assert from_run is not None  # exactly one of --data and --from-run (checked above)
        run_dir, docs = from_run, read_jsonl(from_run / "items.jsonl")
    if not any(d.get("verdict") in ("answer", "hold") for d in docs):
        err_console.print(f"[bold red]error:[/] no item got a decision (see {plain(run_dir)})")
        raise typer.Exit(1)
    result = fm.fit(fm.examples_from_docs(docs), target_accuracy)
    rep, gate = result.report, result.gate
    fitted = fm.Fitted(
        temperature=rep.temperature,
        margin_gate=gate.threshold if gate else None,
        target_accuracy=target_accuracy,
        n=rep.n,
        config_hash=ctx.spec.config_hash(),
        fitted_at=datetime.now(UTC).isoformat(),
        path=path,
        source=str(run_dir),
    )
    target_file = fm.save(out or fm.default_path(ctx.spec.name), fitted)
    curve = [vars(p) for p in result.curve]
    doc = {"fitted": fitted.to_json(), "calibration_file": str(target_file),
           "report": rep.to_json(), "gate": vars(gate) if gate else None, "curve": curve}  # fmt: skip
    write_json(run_dir / "calibration.json", doc)
    pngs = {}
    try:
        pngs["reliability"] = str(
            plots.reliability_png(
                run_dir / "reliability.png", rep.bins_before, rep.bins_after, rep.temperature
            )
        )
        pngs["selective"] = str(
            plots.selective_png(
                run_dir / "selective.png", result.curve, fitted.margin_gate, target_accuracy
            )
        )
    except Exception as e:  # noqa: BLE001 - a missing plot must not lose the fit
        err_console.print(f"[yellow]warning:[/] no plots: {plain(e)}", highlight=False)
    doc["plots"] = pngs  # fmt: skip
    if as_json:
        emit_json("decide calibrate", doc, indent=1)
        return
    _render_fit(doc)


def _render_fit(doc: dict[str, Any]) -> None:
    rep, f = doc["report"], doc["fitted"]
    console.print(
        f"temperature [bold]{rep['temperature']:.3f}[/] on {rep['n']} items · ECE "
        f"{rep['ece_before']:.3f} -> {rep['ece_after']:.3f} · NLL {rep['nll_before']:.3f} -> "
        f"{rep['nll_after']:.3f} · Brier {rep['brier_before']:.3f} -> {rep['brier_after']:.3f}",
        highlight=False,
    )
    bins = Table(title="confidence bins (before -> after)")
    for col in (
        "confidence",
        "n",
        "accuracy",
        "mean conf",
        "n (T)",
        "accuracy (T)",
        "mean conf (T)",
    ):
        bins.add_column(col, justify="right")
    for b, a in zip(rep["bins_before"], rep["bins_after"], strict=True):
        bins.add_row(f"{b['lo']:.1f}-{b['hi']:.1f}", str(b["count"]), _fmt(b["accuracy"]),
                     _fmt(b["confidence"]), str(a["count"]), _fmt(a["accuracy"]),
                     _fmt(a["confidence"]))  # fmt: skip
    console.print(bins)
    gate = doc["gate"]
    if gate:
        console.print(f"gate: hold when margin < [bold]{gate['threshold']:.3f}[/] -> coverage "
                      f"{gate['coverage']:.3f}, accuracy {gate['accuracy']:.3f} "
                      f"(target {f['target_accuracy']:.2f})", highlight=False)  # fmt: skip
    else:
        console.print(f"[yellow]no margin threshold reaches {f['target_accuracy']:.2f}[/]: "
                      "decide keeps its default gate")  # fmt: skip
    curve = Table(title="selective prediction (every ~10th threshold)")
    for col in ("margin >=", "coverage", "accuracy"):
        curve.add_column(col, justify="right")
    pts = doc["curve"]
    for p in pts[:: max(1, len(pts) // 10)]:
        curve.add_row(f"{p['threshold']:.3f}", f"{p['coverage']:.3f}", _fmt(p["accuracy"]))
    console.print(curve)
    console.print(f"saved {doc['calibration_file']}; plots {', '.join(doc['plots'].values()) or '-'}",
                  highlight=False)  # fmt: skip
