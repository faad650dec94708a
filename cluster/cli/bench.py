"""`tpwarden bench`: sweeps, prefill, compare. Rendering only; the work is in cluster.bench.

tpwarden bench sweep -i inventory.yml --concurrency 1,4,8,16,32 --output-len 512 --ignore-eos
tpwarden bench sweep -i inventory.yml --chat-template-kwargs '{"enable_thinking": true}'
tpwarden bench prefill -i inventory.yml --input-len 32k,128k
tpwarden bench compare runs/20260101T000000Z-sweep runs/20260115T000000Z-sweep
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import tpwarden.cluster.cli.completion_values as values
import typer
from rich.table import Table
from tpwarden.cluster.bench.manifest import manifest_diff
from tpwarden.cluster.bench.parse import parse_size_token
from tpwarden.cluster.bench.plan import DEFAULT_PROMPTS, BenchOptions, client_plan
from tpwarden.cluster.bench.runner import BenchRunner, compare_rows, load_run
from tpwarden.cluster.cli.chat_kwargs import ChatTemplateKwargs, chat_kwargs
from tpwarden.cluster.cli.common import console, emit_json, err_console, handle_errors, load, plain
from tpwarden.cluster.cli.inputs import READABLE_FILE
from tpwarden.cluster.cli.options import DEFAULT_INVENTORY, InventoryOption, JsonOption
from tpwarden.cluster.cli.server_view import print_server
from tpwarden.cluster.control.controller import Controller
from tpwarden.cluster.settings import BENCH_OUTPUT_LEN

app = typer.Typer(
    help="Benchmark the server from a CPU-only client container; compare runs.",
    no_args_is_help=True,
)

RunsDir = Annotated[
    Path | None,
    typer.Option("--runs-dir", help="Where run directories go (env TPWARDEN_RUNS_DIR; ./runs)."),
]
ClientImage = Annotated[
    str | None,
    typer.Option("--client-image", help="Client image (default: the serving image)."),
]
DryRun = Annotated[bool, typer.Option("--dry-run", help="Print the client containers; run none.")]
ClientNode = Annotated[
    str | None,
    typer.Option(
        "--client-node",
        help="Run the client on this node (default: the head).",
        autocompletion=values.nodes,
    ),
]
SWEEP_COLUMNS = (
    ("concurrency", "level", "{:d}"),
    ("aggregate tok/s", "aggregate_tok_s", "{:.1f}"),
    ("per stream tok/s", "per_stream_tok_s", "{:.1f}"),
    ("TTFT p50 ms", "ttft_p50_ms", "{:,.0f}"),
    ("ITL p50 ms", "itl_p50_ms", "{:,.0f}"),
    ("acceptance %", "acceptance_pct", "{:.0f}"),
    ("tokens/step", "tokens_per_step", "{:.2f}"),
)
PREFILL_COLUMNS = (
    ("input len", "level", "{:d}"),
    ("input tokens", "input_tokens_per_request", "{:,.0f}"),
    ("TTFT p50 ms", "ttft_p50_ms", "{:,.0f}"),
    ("prefill tok/s", "prefill_tok_s", "{:,.0f}"),
)


def _fmt(fmt: str, v: Any) -> str:
    if v is None:
        return "-"
    try:
        return fmt.format(v)
    except (ValueError, TypeError):
        return str(v)


def _levels(text: str, option: str) -> tuple[int, ...]:

    try:
        levels = tuple(parse_size_token(x) for x in text.split(",") if x.strip())
    except ValueError:
        levels = ()
    if not levels or min(levels) < 1:
        raise typer.BadParameter(
            f"{text!r}: give a comma list of positive numbers such as 1,4,8 or 32k,128k",
            param_hint=option,
        )
    return levels


def _table(
    title: str, rows: list[dict[str, Any]], columns: Sequence[tuple[str, str, str]]
) -> Table:
    table = Table(title=title)
    for head, _, _ in columns:
        table.add_column(head, justify="right")
    for r in rows:
        table.add_row(*(_fmt(fmt, r.get(key)) for _, key, fmt in columns))
    return table


def _run(
    inventory: Path, opts: BenchOptions, runs_dir: Path | None, dry_run: bool, as_json: bool
) -> None:

    spec = load(inventory)
    if dry_run:
        plans = [
            client_plan(spec, opts, lvl, i, "dry-run").to_json()
            for i, lvl in enumerate(opts.levels)
        ]
        if as_json:
            emit_json(f"bench {opts.kind}", {"ok": True, "dry_run": True, "containers": plans})
            return
        table = Table(title=f"bench {opts.kind}: client containers (dry run, none started)")
        for col in ("node", "container", "image", "command"):
            table.add_column(col, overflow="fold")
        for p in plans:
            table.add_row(p["node"], p["container"], p["image"], " ".join(p.get("command") or []))
        console.print(table)
        return
    with Controller(spec) as ctl:
        runner = BenchRunner(
            ctl, runs_dir, on_progress=lambda m: err_console.print(f"[dim]{plain(m)}[/]")
        )
        pre = runner.preflight()
        if not as_json:
            print_server(pre, bench=True)
        run = runner.run(opts, pre)
    rows = run.rows()
    if as_json:
        emit_json(f"bench {opts.kind}", {"ok": True, "run_dir": str(run.dir), "rows": rows})
        return
    cols = SWEEP_COLUMNS if opts.kind == "sweep" else PREFILL_COLUMNS
    console.print(_table(f"{run.run_id} ({spec.name}, config {spec.config_hash()})", rows, cols))
    console.print(f"run directory: {plain(run.dir)}", highlight=False)


@app.command("sweep")
@handle_errors
def sweep(
    inventory: InventoryOption = DEFAULT_INVENTORY,
    concurrency: Annotated[str, typer.Option(help="Comma list of levels.")] = "1,4,8,16,32",
    prompts: Annotated[
        Path | None,
        typer.Option(
            **READABLE_FILE,
            help="JSONL (a `prompt` or chat `messages` per line) or ShareGPT JSON.",
        ),
    ] = None,
    output_len: Annotated[
        int, typer.Option(min=1, help="Output tokens per request.")
    ] = BENCH_OUTPUT_LEN,
    ignore_eos: Annotated[bool, typer.Option(help="Force the full output length.")] = True,
    num_prompts: Annotated[int, typer.Option(min=1, help="Requests per level.")] = 20,
    backend: Annotated[str, typer.Option(help="openai-chat or openai (completions).")] = (
        "openai-chat"
    ),
    temperature: Annotated[float | None, typer.Option(min=0, help="Sampling temperature.")] = None,
    client_image: ClientImage = None,
    runs_dir: RunsDir = None,
    dry_run: DryRun = False,
    as_json: JsonOption = False,
    client_node: ClientNode = None,
    dataset: Annotated[
        str,
        typer.Option(
            help="prompts (the prompt set) or random (random tokens).",
            autocompletion=values.bench_datasets,
        ),
    ] = "prompts",
    random_input_len: Annotated[
        int, typer.Option(help="Input tokens per request with --dataset random.")
    ] = 256,
    chat_template_kwargs: ChatTemplateKwargs = None,
) -> None:
    """One `vllm bench serve` per concurrency level; the field report's table."""

    if backend not in ("openai-chat", "openai"):
        raise typer.BadParameter(f"--backend {backend!r}: openai-chat or openai")
    kwargs = chat_kwargs(chat_template_kwargs)
    if kwargs is not None and backend != "openai-chat":
        raise typer.BadParameter(
            "applies to the chat endpoint only (--backend openai-chat)",
            param_hint="--chat-template-kwargs",
        )
    if dataset not in values.BENCH_DATASETS:
        raise typer.BadParameter(f"--dataset {dataset!r}: prompts or random")
    opts = BenchOptions(
        kind="sweep",
        levels=_levels(concurrency, "--concurrency"),
        prompts=prompts or DEFAULT_PROMPTS,
        output_len=output_len,
        ignore_eos=ignore_eos,
        num_prompts=num_prompts,
        backend=backend,
        temperature=temperature,
        client_image=client_image,
        client_node=client_node,
        dataset=dataset,
        random_input_len=random_input_len,
        chat_template_kwargs=kwargs,
    )
    _run(inventory, opts, runs_dir, dry_run, as_json)


@app.command("prefill")
@handle_errors
def prefill(
    inventory: InventoryOption = DEFAULT_INVENTORY,
    input_len: Annotated[str, typer.Option(help="Comma list, e.g. 32k,128k.")] = "32k,128k",
    num_prompts: Annotated[
        int, typer.Option(min=1, help="Requests per length (one at a time).")
    ] = 1,
    output_len: Annotated[int, typer.Option(min=1, help="Output tokens per request.")] = 1,
    client_image: ClientImage = None,
    runs_dir: RunsDir = None,
    dry_run: DryRun = False,
    as_json: JsonOption = False,
    client_node: ClientNode = None,
) -> None:
    """TTFT and prefill tok/s for long random inputs (one request at a time)."""

    opts = BenchOptions(
        kind="prefill",
        levels=_levels(input_len, "--input-len"),
        output_len=output_len,
        num_prompts=num_prompts,
        backend="openai",
        client_image=client_image,
        client_node=client_node,
    )
    _run(inventory, opts, runs_dir, dry_run, as_json)


@app.command("compare")
@handle_errors
def compare(
    run_a: Annotated[Path, typer.Argument(help="Earlier run directory.")],
    run_b: Annotated[Path, typer.Argument(help="Later run directory.")],
    as_json: JsonOption = False,
) -> None:
    """Two runs side by side with % changes, and the recorded differences that could explain
    them (clock caps, drafter k, KV cache, thinking default, versions, busy processes)."""

    ma, ta = load_run(run_a)
    mb, tb = load_run(run_b)
    cols = SWEEP_COLUMNS if ta.get("kind") == "sweep" else PREFILL_COLUMNS
    keys = [k for _, k, _ in cols[1:]]
    rows = compare_rows(ta["rows"], tb["rows"], keys)
    diffs = manifest_diff(ma, mb)
    if as_json:
        emit_json("bench compare", {"rows": rows, "differences": [d.__dict__ for d in diffs]})
        return
    table = Table(title=f"A = {run_a.name}   B = {run_b.name}")
    table.add_column(cols[0][0], justify="right")
    for head, _, _ in cols[1:]:
        table.add_column(f"{head}\nA → B (Δ%)", justify="right")
    for r in rows:
        cells = [str(r["level"])]
        for _, key, fmt in cols[1:]:
            c = r[key]
            pct = "" if c["pct"] is None else f" ({c['pct']:+.0f}%)"
            cells.append(f"{_fmt(fmt, c['a'])} → {_fmt(fmt, c['b'])}{pct}")
        table.add_row(*cells)
    console.print(table)
    if not diffs:
        console.print("manifests: no recorded difference")
        return
    dt = Table(title="what changed between the runs")
    for col in ("", "fact", "A", "B"):
        dt.add_column(col, overflow="fold")
    for d in diffs:
        dt.add_row("*" if d.likely_cause else "", d.fact, str(d.a), str(d.b))
    console.print(dt)
    console.print("* can change throughput by itself", style="dim")
