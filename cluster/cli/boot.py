"""CLI for `tpwarden boot`: the boot progress bar, boot reports and notes, and `--from-file`
(judge a vLLM log copied from anywhere). `up`, `restart` and `status` reuse the renderers.
Rendering lives here and only here; the verdict comes from `tpwarden.cluster.boot.progress`.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from tpwarden.cluster.boot.crash import LINE_LABEL as CRASH_LABEL
from tpwarden.cluster.boot.crash import Crash
from tpwarden.cluster.boot.progress import BootNote, BootProgress, read_boot_log
from tpwarden.cluster.cli.common import console, emit_json, err_console, handle_errors, load, plain
from tpwarden.cluster.cli.options import DEFAULT_INVENTORY, InventoryOption, JsonOption
from tpwarden.cluster.control.controller import Controller
from tpwarden.cluster.control.results import BootResult, ControlEvent
from tpwarden.cluster.durable import JSONObject
from tpwarden.cluster.errors import ConfigError
from tpwarden.cluster.vllm.log_prefix import parse_prefix

Timeout = Annotated[float, typer.Option("--timeout", min=1, help="Seconds to wait for the server.")]
commands = typer.Typer()  # `boot`, merged into the main app with cluster control's commands


# 2: the boot's root-cause line moved from `error` to `boot_error` (`error` is the envelope's
# failure object in every command's JSON, issue 30)
BOOT_SCHEMA_VERSION = 2


def boot_fields(progress: BootProgress) -> JSONObject:
    """The boot's JSON fields under the envelope: ``error`` renamed ``boot_error``."""
    doc = progress.to_json()
    doc["boot_error"] = doc.pop("error", None)
    return doc


def fmt_s(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = int(seconds)
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


class BootView:
    """Event callback that drives one rich progress bar (phase, shards a/b, ETA)."""

    def __init__(self) -> None:
        self.progress = Progress(
            TextColumn("[bold]{task.fields[phase]}"),
            BarColumn(),
            TextColumn("{task.percentage:>3.0f}%"),
            TextColumn("eta {task.fields[eta]}"),
            TimeElapsedColumn(),
            console=console,
            transient=False,
        )
        self.task = self.progress.add_task(
            "boot", total=1.0, phase="starting", eta="-", visible=False
        )

    def __call__(self, ev: ControlEvent) -> None:
        if ev.progress is None or ev.kind not in ("boot", "ready", "failed"):
            if ev.kind in ("remove", "start", "preflight", "info"):
                self.progress.console.print(f"[dim]{plain(ev.node or '*')}[/] {plain(ev.message)}")
            return
        p = ev.progress
        eta = "no history" if p.eta_s is None and not p.failed else fmt_s(p.eta_s)
        self.progress.update(
            self.task, completed=p.fraction, phase=p.describe(), eta=eta, visible=True
        )


def report_boot(boot: BootResult) -> None:
    if boot.ready:
        p = boot.progress
        console.print(
            f"[green]ready[/] in {fmt_s(boot.elapsed_s)}"
            + (
                f", KV cache {p.kv_cache_gib} GiB / {p.kv_cache_tokens} tokens"
                if p.kv_cache_gib
                else ""
            )
        )
        return
    err_console.print(f"[red]boot failed[/] after {fmt_s(boot.elapsed_s)}: {plain(boot.reason)}")
    for node, text in boot.last_lines.items():
        err_console.rule(node)
        err_console.print(text, markup=False, highlight=False)


def print_notes(notes: Sequence[BootNote], limit: int = 12) -> None:
    """Non-fatal ERROR/WARNING lines of the boot: errors first, repeats counted."""
    ordered = sorted(notes, key=lambda n: (n.level not in ("ERROR", "CRITICAL"), n.after_ready))
    for n in ordered[:limit]:
        colour = "red" if n.level in ("ERROR", "CRITICAL") else "yellow"
        when = " after ready" if n.after_ready else ""
        times = f" (x{n.count})" if n.count > 1 else ""
        console.print(
            f"[{colour}]note[/] {n.level}{when} [dim]{plain(n.who)}[/]{times}: {plain(n.message)}",
            highlight=False,
        )
    if len(ordered) > limit:
        console.print(f"[dim]... {len(ordered) - limit} more notes (--json shows all)[/]")


def print_crash(crash: Crash | None) -> None:
    """A worker that died, on one line of at most 80 columns (`crash: rank 1 died by SIGILL
    (illegal instruction) on the first request`), then what its signal means."""
    if crash is None:
        return
    console.print(f"[red]{CRASH_LABEL}[/]{plain(crash.line())}", highlight=False, soft_wrap=True)
    if crash.signal is not None:
        console.print(f"{crash.signal.name}: {crash.signal.meaning}", highlight=False)


def _report_log_verdict(p: BootProgress, source: str) -> None:
    colour = {"ready": "green", "failed": "red"}.get(p.verdict, "yellow")
    verdict = p.verdict
    if p.ready and p.crash is not None:  # the boot was ready; the server died after (issue 49)
        colour, verdict = "red", "ready, then a rank died"
    name = source if source == "-" else Path(source).name  # --json keeps the path as given
    console.print(f"[{colour}]{verdict}[/] ({plain(name)}): {plain(p.describe())}", highlight=False)
    print_crash(p.crash)
    facts = []
    if p.version:
        facts.append(f"vLLM {p.version}")
    if p.shards_total:
        facts.append(f"shards {p.shards_loaded}/{p.shards_total}")
    if p.drafter_shards_total:
        facts.append(f"drafter shards {p.drafter_shards_loaded}/{p.drafter_shards_total}")
    if p.kv_cache_tokens:
        facts.append(f"KV cache {p.kv_cache_tokens} tokens")
    if facts:
        console.print(", ".join(facts), highlight=False)
    if p.failed and p.error_context:
        console.print(f"[dim]reported as:[/] {plain(p.error_context)}", highlight=False)
    if not p.ready and not p.failed and p.last_line:
        console.print(f"[dim]last line:[/] {plain(p.last_line)}", highlight=False)
    print_notes(p.notes)


@commands.command("boot")
@handle_errors
def boot(
    inventory: InventoryOption = DEFAULT_INVENTORY,
    timeout: Timeout = 2400.0,
    from_file: Annotated[
        str | None,
        typer.Option(
            "--from-file",
            help="Read a vLLM log copied from anywhere ('-' = stdin) instead of the cluster: "
            "where did this boot stop, and why.",
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Attach to a boot in progress: phase, shards, ETA, until the server answers; or judge a
    saved log with --from-file (exit 0 ready, 1 failed or stopped short of ready)."""
    if from_file is not None:
        progress = _read_log_file(from_file)
        if as_json:
            doc = {"ok": progress.ready, "source": from_file, **boot_fields(progress)}
            emit_json("boot", doc, version=BOOT_SCHEMA_VERSION)
        else:
            _report_log_verdict(progress, from_file)
        raise typer.Exit(0 if progress.ready else 1)
    spec = load(inventory)
    view = BootView()
    with Controller(spec, on_event=None if as_json else view) as ctl:
        if as_json:
            result = ctl.attach_boot(timeout_s=timeout)
        else:
            with view.progress:
                result = ctl.attach_boot(timeout_s=timeout)
    if as_json:
        emit_json(
            "boot",
            {
                "ok": result.ready,
                "ready": result.ready,
                "elapsed_s": round(result.elapsed_s, 3),
                "reason": result.reason,
                **boot_fields(result.progress),
            },
            version=BOOT_SCHEMA_VERSION,
        )
    else:
        report_boot(result)
        print_notes(result.progress.notes)
    raise typer.Exit(0 if result.ready else 1)


# what only vLLM (or Python under it) writes: its name, a traceback
_VLLM_WORDS = re.compile(r"vllm|Traceback \(most recent call last\)", re.IGNORECASE)


def vllm_line(line: str) -> bool:
    """A line vLLM wrote: its name or a traceback in it, or vLLM's own prefixes (`INFO 12-01
    22:00:00 [api_server.py:1]`, a `(APIServer pid=1)` process) as `log_prefix` reads them.
    A log level alone is not enough: every program's log has those."""
    if _VLLM_WORDS.search(line):
        return True
    got = parse_prefix(line)
    return got.source is not None or got.process is not None


def _read_log_file(path: str) -> BootProgress:
    """The boot verdict of a saved log; an empty file or one with no vLLM line is bad input
    (exit 2), not an "incomplete" boot."""
    try:
        if path == "-":
            lines = sys.stdin.readlines()
        else:
            with open(path, encoding="utf-8", errors="replace") as f:
                lines = f.readlines()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the log ({exc.strerror or exc})") from None
    body = [line for line in lines if line.strip() and not line.startswith("#")]
    if not body:
        raise ConfigError(f"{path}: empty log", key="--from-file", hint="give a vLLM log")
    if any("\x00" in line for line in body) or not any(vllm_line(line) for line in body):
        raise ConfigError(
            f"{path}: not a vLLM log (no line of vLLM's in {len(body)} lines)",
            key="--from-file",
            hint="save it with `docker logs CONTAINER > head.log`",
        )
    return read_boot_log(lines)
