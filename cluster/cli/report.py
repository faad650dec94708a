"""`tpwarden report`: the morning report. Parses options, reads files, renders; the facts come
from `tpwarden.cluster.reports.morning` (pure) and the thermal part from the one thermal report."""

from __future__ import annotations

import dataclasses
import os
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import typer
from tpwarden.cluster.bench.runner import default_runs_dir
from tpwarden.cluster.cli.common import (
    console,
    emit_failure,
    emit_json,
    err_console,
    error_line,
    handle_errors,
    load,
    plain,
)
from tpwarden.cluster.durable import JSONValue, default_state_dir
from tpwarden.cluster.errors import ConfigError
from tpwarden.cluster.ledger.record import ledger_file
from tpwarden.cluster.reports.morning import MorningReport, headline, morning_to_json
from tpwarden.cluster.reports.morning_html import morning_html, text_lines
from tpwarden.cluster.reports.morning_io import (
    SAMPLE_HEAD,
    SAMPLE_TZ,
    SAMPLE_ZONE_ROLES,
    Sources,
    morning_from_files,
    unpack_sample,
)
from tpwarden.cluster.reports.thermal import (
    fetch as thermal_fetch,  # looked up per call: tests substitute it
)
from tpwarden.cluster.reports.thermal.localtime import (
    SINCE_HELP,
    TZ_HELP,
    UNTIL_HELP,
    local_iso,
    parse_tz,
    parse_window,
    span_text,
)
from tpwarden.cluster.reports.thermal.plot import figure_png, thermal_figure

OptPath = Annotated[Path | None, typer.Option()]


@handle_errors
def report(
    inventory: Annotated[
        Path | None,
        typer.Option(
            "--inventory",
            "-i",
            help="Read the watchdog log and every node's thermal "
            "files as the inventory says (thermal files over SFTP).",
        ),
    ] = None,  # fmt: skip
    from_dir: Annotated[
        Path | None,
        typer.Option("--from-dir", help="A directory with events.jsonl, thermal/ and runs/."),
    ] = None,
    since: Annotated[str | None, typer.Option(help=SINCE_HELP)] = None,
    until: Annotated[str | None, typer.Option(help=UNTIL_HELP)] = None,
    tz: Annotated[str | None, typer.Option("--tz", help=TZ_HELP)] = None,
    runs_dir: Annotated[
        Path | None,
        typer.Option("--runs-dir", help="Bench run directories (-i: TPWARDEN_RUNS_DIR or ./runs)."),
    ] = None,
    head: Annotated[str | None, typer.Option("--head", help="Head node (with --from-dir).")] = None,
    zone_role: Annotated[
        list[str], typer.Option("--zone-role", help="INDEX=ROLE, e.g. 5='GPU zone' (repeatable).")
    ] = [],  # noqa: B006
    html: Annotated[Path | None, typer.Option("--html", help="Write one HTML page here.")] = None,
    plot: Annotated[Path | None, typer.Option("--plot", help="Write the PNG plot here.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    sample: Annotated[
        bool,
        typer.Option(
            "--sample",
            help="The sample night shipped with tpwarden (4 nodes, a heat fault, a hang and the "
            "watchdog's restart, a bench and an eval run), in its zone unless --tz: see the "
            "page, the plot and the JSON without a cluster.",
        ),
    ] = False,
) -> None:
    """How the night went: uptime and restarts with causes, watchdog decisions, thermal peaks
    per node and zone role with margin to critical, throttle episodes, gaps, bench, eval and tune runs.
    Exit 1 when a source could not be read (a node's thermal files, the event log)."""

    if [inventory is not None, from_dir is not None, sample].count(True) != 1:
        raise ConfigError(
            "give exactly one of --inventory/-i, --from-dir and --sample", key="--from-dir"
        )
    if sample:
        tz = tz or SAMPLE_TZ
        head = head or SAMPLE_HEAD
    if from_dir is not None and not from_dir.is_dir():
        raise ConfigError(f"{from_dir}: not a directory", key="--from-dir")
    for option, out in (("--html", html), ("--plot", plot)):
        if out is not None:
            check_output_path(out, option)
    try:
        zone = parse_tz(tz)
        now = time.time()
        t_since, t_until = parse_window(since, until, zone, now)
    except ValueError as exc:
        raise ConfigError(str(exc), key="--since/--until/--tz") from None
    if t_since is not None and t_until is None:
        t_until = now  # only --since: the window ends now
    roles_map = _zone_roles(zone_role) or (dict(SAMPLE_ZONE_ROLES) if sample else {})
    problems: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="tpwarden-report-") as tmp:
        if sample:
            from_dir = unpack_sample(Path(tmp) / "sample")
        if from_dir is not None:
            src = Sources.from_dir(from_dir)
            roles = {head: "head"} if head else None  # others: the role their agent recorded
        else:
            assert inventory is not None
            spec = load(inventory)
            fetched = thermal_fetch.fetch_files(spec, t_since, t_until, tmp)
            problems.update(fetched.unreachable)
            roles = {n.name: n.role for n in spec.nodes}
            roles_map = {**spec.thermal.zone_roles, **roles_map}

            from tpwarden.watchdog.remote import watchdog_events  # deferred: SSH, -i only

            (Path(tmp) / "watchdog").mkdir()
            events, unread = watchdog_events(spec, Path(tmp) / "watchdog")
            if unread:
                problems["watchdog"] = unread
            src = Sources(
                events, Path(tmp), default_runs_dir(), default_state_dir() / "events.jsonl",
                ledger_file(spec),
            )  # fmt: skip
        if runs_dir is not None:
            src = dataclasses.replace(src, runs_dir=runs_dir)
        if not src.events.is_file() and "watchdog" not in problems:
            problems["watchdog"] = f"no event log at {src.events}"
        rep, records = morning_from_files(
            src, since=t_since, until=t_until, roles=roles, zone_roles=roles_map or None
        )
    if _empty(rep, records):
        window = f"{since or 'the start'} - {until or 'now'}"
        message = f"no data for {window} in the event log, thermal files and runs"
        err_console.print(error_line(message), highlight=False, soft_wrap=True)
        if as_json:
            emit_failure("report", "no_data", message, "widen --since/--until", 1)
        raise typer.Exit(1)
    png = None
    if html or plot:
        marks = [(r.ts, "restart") for r in rep.watchdog.restarts]
        fig = thermal_figure(rep.thermal, records, zone, roles_map or None, marks)
        png = figure_png(fig)
        if plot:
            plot.write_bytes(png)
    if html:
        html.write_text(morning_html(rep, zone, png), encoding="utf-8")
    code = 1 if problems else 0
    if as_json:
        doc = morning_to_json(rep)
        doc["tz"] = tz or "UTC"
        doc["since_local"], doc["until_local"] = (
            local_iso(rep.since, zone),
            local_iso(rep.until, zone),
        )
        doc["unread"] = problems
        emit_json("report", {"ok": code == 0, **doc})
        raise typer.Exit(code)
    console.print(f"[bold]Night report, {span_text(rep.since, rep.until, zone)}[/]")
    console.print(headline(rep), highlight=False)
    for note in rep.notes:
        console.print(f"[yellow]note:[/] {plain(note)}")
    for line in text_lines(rep, zone):
        console.print(line, highlight=False, markup=False)
    for name, why in sorted(problems.items()):
        err_console.print(f"[red]{plain(name)}: not read ({plain(why)})[/]")
    for p in (html, plot):
        if p:
            console.print(f"wrote {plain(p)}")
    raise typer.Exit(code)


def _empty(rep: MorningReport, records: Sequence[JSONValue]) -> bool:
    """Nothing at all in the window: no probe, restart, alert, thermal sample, bench, eval or
    tune run."""
    wd = rep.watchdog
    return not (records or wd.probes or wd.restarts or wd.alerts or wd.holds or rep.bench
                or rep.evals or rep.tunes or rep.thermal.nodes)  # fmt: skip


def check_output_path(path: Path, option: str) -> None:
    """A file the command will write: its folder must exist and be writable (exit 2 up front,
    not a traceback after the work is done)."""
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise ConfigError(f"{path}: no such directory {folder}", key=option)
    if path.is_dir():
        raise ConfigError(f"{path}: is a directory", key=option, hint="give a file name")
    if not os.access(folder, os.W_OK):
        raise ConfigError(f"{path}: cannot write in {folder}", key=option)


def _zone_roles(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, role = item.partition("=")
        if not sep or not key.strip() or not role.strip():
            raise ConfigError(f"--zone-role {item!r}", key="--zone-role", hint="INDEX=ROLE")
        out[key.strip()] = role.strip()
    return out


def register(app: typer.Typer) -> None:
    app.command("report")(report)
