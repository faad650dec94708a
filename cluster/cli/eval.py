"""`tpwarden eval`: lm-evaluation-harness runs and comparisons. Rendering only; the work is in
cluster.eval.

tpwarden eval presets
tpwarden eval run -i inventory.yml --suite field
tpwarden eval run -i inventory.yml --tasks mmlu,kmmlu,kormedmcqa,humaneval,gsm8k --limit 50
tpwarden eval run -i inventory.yml --tasks my_mc --include-path tasks/ --dry-run
tpwarden eval run -i inventory.yml --tasks gsm8k --chat-template-kwargs '{"enable_thinking": true}'
tpwarden eval compare runs/A-eval runs/B-eval
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import tpwarden.cluster.cli.completion_values as values
import typer
from rich.table import Table
from tpwarden.cluster.bench.runner import default_runs_dir, load_run
from tpwarden.cluster.cli.chat_kwargs import chat_kwargs
from tpwarden.cluster.cli.common import console, emit_json, err_console, handle_errors, load, plain
from tpwarden.cluster.cli.eval_datasets import app as datasets_app
from tpwarden.cluster.cli.eval_image import app as image_app
from tpwarden.cluster.cli.options import DEFAULT_INVENTORY, InventoryOption, JsonOption
from tpwarden.cluster.cli.server_view import print_server
from tpwarden.cluster.control.controller import Controller
from tpwarden.cluster.durable import JSONObject, JSONValue
from tpwarden.cluster.eval.cache import read_index
from tpwarden.cluster.eval.catalog import DEFAULT_TASKS, SUITES, preset_rows, suite_tasks
from tpwarden.cluster.eval.datasets import data_refusal, hub_tasks
from tpwarden.cluster.eval.plan import EvalOptions
from tpwarden.cluster.eval.presets import (
    EvalError,
    EvalInputError,
    plan_stops,
    stop_limit,
)
from tpwarden.cluster.eval.progress import render_progress, render_summary
from tpwarden.cluster.eval.results import comparability, compare_scores, eval_differences
from tpwarden.cluster.eval.runner import (
    EvalRunner,
    container_plan,
    local_tasks,
    presets,
)
from tpwarden.cluster.spec import ClusterSpec

app = typer.Typer(
    help="Accuracy runs (lm-evaluation-harness 0.4.13) from the CPU-only client container.",
    no_args_is_help=True,
)
app.add_typer(datasets_app, name="datasets")
app.add_typer(image_app, name="image")


def _fmt(v: JSONValue, scale: float = 100.0) -> str:
    return "-" if not isinstance(v, (int, float)) else f"{scale * v:.1f}"


def _csv(text: str | None) -> tuple[str, ...]:
    return tuple(x.strip() for x in (text or "").split(",") if x.strip())


def _print_plans(plans: list[JSONObject]) -> None:
    for p in plans:
        console.print(
            plain(f"{p['task']}: {p['path']} · {p['stops']} · {p['note']}"), highlight=False
        )


def _stops_cell(row: JSONObject) -> str:
    sent, yaml_stops = row["stops_sent"], row["stops_yaml"]
    if not yaml_stops:
        return "-"
    return f"{len(sent)} of {len(yaml_stops)}" if len(sent) != len(yaml_stops) else str(len(sent))


@app.command("presets")
@handle_errors
def list_presets(
    inventory: Annotated[
        Path | None,
        typer.Option(
            "--inventory",
            "-i",
            help="Show the stops sent under this inventory's vLLM version and serving env.",
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """The built-in task presets: path, few-shot, stops, headline metric, and the field
    report's score beside each for reference (read, never compared automatically).

    """

    limit: int | None = stop_limit(None)  # vLLM >= 0.28's default (VLLM_MAX_STOP_STRINGS)
    if inventory is not None:
        spec = load(inventory)
        limit = stop_limit(spec.serving.vllm_version, dict(spec.serving.env))
    rows = preset_rows()
    for r in rows:
        until = tuple(r["stops_yaml"]) or None
        keep = tuple(r["stops_kept"]) if r["stops_kept"] is not None else None
        plan = plan_stops(until, limit, keep)
        r["stops_sent"], r["stops"] = list(plan.sent), plan.describe()
    if as_json:
        suites = {k: list(v) for k, v in SUITES.items()}
        emit_json("eval presets", {"presets": rows, "suites": suites})
        return
    table = Table(title="eval presets (lm-eval 0.4.13)")
    for col in ("task", "path", "shots", "stops", "metric", "report"):
        table.add_column(col, justify="right" if col in ("shots", "report") else "left")
    for r in rows:
        ref = r["report"]
        table.add_row(
            r["task"], r["path"], str(r["shots"]) + (" (pinned)" if r["shots_pinned"] else ""),
            _stops_cell(r), r["metric"] or "-", "-" if ref is None else f"{ref['score']:.1f}",
        )  # fmt: skip
    console.print(table)
    for name, tasks in SUITES.items():
        console.print(f"suite {name}: {', '.join(tasks)}", highlight=False)


def _missing_data(
    spec: ClusterSpec, opts: EvalOptions, inventory: Path, hf_cache: str | None
) -> str | None:
    """Why the Hub tasks cannot run offline, or None. Reads the head's cache index over SSH
    only when the inventory names a cache (without one, nothing is contacted)."""

    def head_index() -> JSONObject | None:
        with Controller(spec) as ctl:
            return read_index(ctl.session(spec.head), hf_cache or "")

    local = local_tasks(Path(opts.include_path) if opts.include_path else None)
    needed = hub_tasks(opts.tasks, local)
    return data_refusal(needed, opts.suite, str(inventory), hf_cache, head_index)


@app.command("run")
@handle_errors
def run(
    inventory: InventoryOption = DEFAULT_INVENTORY,
    tasks: Annotated[
        str | None,
        typer.Option(
            help=f"Comma list of lm-eval task names (default {','.join(DEFAULT_TASKS)}).",
            autocompletion=values.eval_tasks,
        ),
    ] = None,
    suite: Annotated[
        str | None,
        typer.Option(
            help=f"A named suite instead of --tasks: {', '.join(sorted(SUITES))}.",
            autocompletion=values.eval_suites,
        ),
    ] = None,
    num_fewshot: Annotated[
        int | None,
        typer.Option(
            "--num-fewshot", min=0, help="Few-shot count for every task (not a YAML's pinned 0)."
        ),
    ] = None,
    limit: Annotated[
        int | None, typer.Option(min=1, help="Items per task (lm-eval --limit).")
    ] = None,
    include_path: Annotated[
        Path | None,
        typer.Option(
            "--include-path",
            exists=True,
            file_okay=False,
            help="Folder of task YAMLs (+ data files).",
        ),
    ] = None,
    chat: Annotated[
        str | None,
        typer.Option(
            help="Local generate_until tasks to send through chat.",
            autocompletion=values.local_tasks,
        ),
    ] = None,
    num_concurrent: Annotated[
        int | None, typer.Option(help="Concurrent requests (inventory tpwarden.eval; 16).")
    ] = None,
    client_image: Annotated[str | None, typer.Option(help="Client image with lm_eval.")] = None,
    resume: Annotated[
        Path | None,
        typer.Option(
            exists=True, file_okay=False, help="Continue this run directory (finished tasks kept)."
        ),
    ] = None,
    runs_dir: Annotated[Path | None, typer.Option(help="Where run directories go.")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the plan; run nothing.")] = (
        False
    ),
    no_data_check: Annotated[
        bool,
        typer.Option(
            "--no-data-check",
            help="Skip the check that the head's cache index lists every task (a cache filled "
            "by hand).",
        ),
    ] = False,
    chat_template_kwargs: Annotated[
        str | None,
        typer.Option(
            "--chat-template-kwargs",
            metavar="JSON",
            help="""chat_template_kwargs of every chat-path request, e.g. '{"enable_thinking": """
            """true}' (recorded in the manifest; the server's default stays as it is).""",
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Run lm-eval tasks against the server; one client container per task, resumable.

    Example: tpwarden eval run -i inventory.yml --suite field   (or --tasks mmlu,humaneval)
    """

    if suite is not None and tasks is not None:
        raise typer.BadParameter("give --suite or --tasks, not both", param_hint="--suite")
    kwargs = chat_kwargs(chat_template_kwargs)
    task_names = suite_tasks(suite) if suite is not None else _csv(tasks) or DEFAULT_TASKS
    spec = load(inventory)
    opts = EvalOptions(
        tasks=task_names,
        suite=suite,
        keep_going=suite is not None,  # a night's suite goes on past a failed task
        num_fewshot=num_fewshot,
        limit=limit,
        num_concurrent=num_concurrent or spec.eval.num_concurrent,
        include_path=str(include_path) if include_path else None,
        chat_tasks=_csv(chat),
        client_image=client_image,
        chat_template_kwargs=kwargs,
    )
    presets(opts, include_path)  # an unknown task is bad input: refused before any connection
    refused = None if no_data_check else _missing_data(spec, opts, inventory, spec.eval.hf_cache)
    if refused and not dry_run:
        raise EvalInputError(refused)
    with Controller(spec) as ctl:
        runner = EvalRunner(
            ctl,
            runs_dir or default_runs_dir(),
            on_progress=lambda m: err_console.print(plain(m), highlight=False),
            on_task_progress=lambda p: err_console.print(render_progress(p), highlight=False),
        )
        pre = runner.preflight()
        if dry_run:
            plans = [
                {**p.to_json(), "container": container_plan(spec, p, "<client image>", "dry-run")
                 .to_json()}
                for p in runner.plan(opts, pre)
            ]  # fmt: skip
            out = {"dry_run": True, "preflight": pre, "plans": plans, "data_missing": refused}
            emit_json("eval run", out, indent=2)
            return
        if not as_json:
            print_server(pre)
        run_dir, manifest, rows = runner.run(opts, pre, resume=resume)
    failed = [f["task"] for f in manifest.get("failed") or [] if f["task"] in _unscored(rows)]
    if as_json:
        doc: JSONObject = {"run_dir": str(run_dir), "suite": opts.suite, "rows": rows}
        doc["summary"] = manifest.get("summary")
        if failed:
            message = f"tasks failed (the suite went on): {', '.join(failed)}"
            hint = f"{_rerun(inventory, opts, run_dir)} reruns only those"
            doc.update(ok=False, error={"kind": "failed", "message": message, "hint": hint,
                                        "exit_code": 1})  # fmt: skip
        emit_json("eval run", doc, indent=2)
    else:
        _print_run(spec, inventory, opts, run_dir, manifest, rows)
    if failed:
        raise typer.Exit(1)


def _rerun(inventory: Path, opts: EvalOptions, run_dir: Path) -> str:
    what = f"--suite {opts.suite}" if opts.suite else f"--tasks {','.join(opts.tasks)}"
    return f"tpwarden eval run -i {inventory} {what} --resume {run_dir}"


def _unscored(rows: list[JSONObject]) -> set[str]:
    return {r["task"] for r in rows if r.get("score") is None}


def _print_run(
    spec: ClusterSpec, inventory: Path, opts: EvalOptions, run_dir: Path, manifest: JSONObject,
    rows: list[JSONObject],
) -> None:  # fmt: skip
    _print_plans(manifest["plans"])
    table = Table(title=f"{manifest['run_id']} ({spec.name}, config {spec.config_hash()})")
    for col in ("task", "path", "n", "score", "± stderr", "metric"):
        table.add_column(col, justify="left" if col in ("task", "path", "metric") else "right")
    for r in rows:
        table.add_row(
            r["task"], r["path"], str(r["n"] or "-"), _fmt(r["score"]), _fmt(r["stderr"]),
            r["metric"] or "-",
        )  # fmt: skip
    console.print(table)
    if manifest.get("restarts"):
        console.print(f"server restarts survived: {len(manifest['restarts'])}", highlight=False)
    for line in render_summary(opts.suite, manifest.get("summary") or []):
        console.print(plain(line), highlight=False)
    console.print(f"run directory: {plain(run_dir)}", highlight=False)
    if any(r.get("error") for r in rows):
        console.print(f"rerun the failed tasks: {plain(_rerun(inventory, opts, run_dir))}",
                      highlight=False)  # fmt: skip


@app.command("compare")
@handle_errors
def compare(
    run_a: Annotated[Path, typer.Argument(help="Earlier run directory.")],
    run_b: Annotated[Path, typer.Argument(help="Later run directory.")],
    force: Annotated[
        bool, typer.Option(help="Compare even if thinking defaults or task paths differ.")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Per-task score deltas, and what changed between the runs' manifests. Refused when the
    runs had different chat-template defaults (thinking) or task paths, unless --force.

    Example: tpwarden eval compare runs/20260101T000000Z-eval runs/20260115T000000Z-eval
    """

    ma, ta = load_run(run_a)
    mb, tb = load_run(run_b)
    refusal = comparability(ma, mb)
    diffs = eval_differences(ma, mb)
    rows = compare_scores(ta["rows"], tb["rows"])
    if refusal and not force:
        lines = "\n".join(f"  - {r}" for r in refusal.reasons)
        raise EvalError(f"runs are not comparable:\n{lines}\n(--force to compare anyway)")
    if as_json:
        doc = {
            "rows": rows,
            "differences": [d.__dict__ for d in diffs],
            "not_comparable": list(refusal.reasons) if refusal else [],
        }
        emit_json("eval compare", doc, indent=2)
        return
    table = Table(title=f"A = {run_a.name}   B = {run_b.name}")
    for col in ("task", "path", "A", "B", "Δ points", "n A/B"):
        table.add_column(col, justify="left" if col in ("task", "path") else "right")
    for r in rows:
        d = r["delta_points"]
        table.add_row(
            r["task"], r["path"] or "-", _fmt(r["a"]), _fmt(r["b"]),
            "-" if d is None else f"{d:+.1f}", f"{r['n_a']}/{r['n_b']}",
        )  # fmt: skip
    console.print(table)
    if refusal:
        for reason in refusal.reasons:
            console.print(f"[yellow]not comparable (forced):[/] {plain(reason)}", highlight=False)
    dt = Table(title="what changed between the runs")
    for col in ("", "fact", "A", "B"):
        dt.add_column(col, overflow="fold")
    for d in diffs:
        dt.add_row("*" if d.likely_cause else "", d.fact, str(d.a), str(d.b))
    console.print(dt if diffs else "manifests: no recorded difference")
