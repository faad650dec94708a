"""`tpwarden thermal report`: peaks, margins to critical, throttle episodes and gaps over the
thermal agents' files, in the operator's time zone. The facts come from
``tpwarden.cluster.reports.thermal.report`` (the one thermal report; `tpwarden report` reuses it)."""

from __future__ import annotations

import tempfile
import time
from datetime import UTC, tzinfo
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table
from tpwarden.cluster.cli.common import emit_json, handle_errors, load, plain
from tpwarden.cluster.cli.inputs import output_dir, output_file
from tpwarden.cluster.cli.inputs import zone_roles as parse_zone_roles
from tpwarden.cluster.cli.thermal_common import fmt_temp, print_unreachable
from tpwarden.cluster.reports.thermal import (
    fetch as thermal_fetch,  # looked up per call: tests substitute it
)
from tpwarden.cluster.reports.thermal.export import report_from_dir, write_csv, write_plot
from tpwarden.cluster.reports.thermal.localtime import (
    SINCE_HELP,
    TZ_HELP,
    UNTIL_HELP,
    local,
    local_iso,
    parse_tz,
    parse_window,
    span_text,
)
from tpwarden.cluster.reports.thermal.report import FieldReport, report_to_json

commands = typer.Typer()  # `thermal report`, mounted by `cli.thermal`


@commands.command("report")
@handle_errors
def report(
    inventory: Annotated[
        Path | None,
        typer.Option("--inventory", "-i", help="Pull every node's files over SFTP first."),
    ] = None,
    from_dir: Annotated[
        Path | None,
        typer.Option(
            "--from-dir", exists=True, file_okay=False, help="Directory of thermal-*.jsonl files."
        ),
    ] = None,
    since: str | None = typer.Option(None, "--since", help=SINCE_HELP),
    until: str | None = typer.Option(None, "--until", help=UNTIL_HELP),
    head: str | None = typer.Option(None, "--head", help="The head node (others are workers)."),
    keep: Annotated[
        Path | None,
        typer.Option("--keep", callback=output_dir, help="With -i: keep the pulled files here."),
    ] = None,
    csv_path: Annotated[
        Path | None,
        typer.Option("--csv", callback=output_file, help="Write every sample as CSV here."),
    ] = None,
    plot_path: Annotated[
        Path | None, typer.Option("--plot", callback=output_file, help="Write a PNG plot here.")
    ] = None,
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    tz: str | None = typer.Option(None, "--tz", help=TZ_HELP),
    zone_role: Annotated[
        list[str], typer.Option("--zone-role", help="INDEX=ROLE (adds to the inventory's map).")
    ] = [],  # noqa: B006
) -> None:
    """Peaks, margins to critical, throttle episodes and gaps: every node's files (-i) or a
    local directory (--from-dir). Exit 1 when a node could not be read."""

    if (inventory is None) == (from_dir is None):
        raise typer.BadParameter("give exactly one of --inventory/-i and --from-dir")
    try:
        zone = parse_tz(tz)
        t_since, t_until = parse_window(since, until, zone, time.time())
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--since/--until/--tz") from None
    zone_roles = parse_zone_roles(zone_role)
    roles: dict[str, str] | None = None
    unreachable: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="tpwarden-thermal-") as tmp:
        directory = from_dir
        if inventory is not None:
            spec = load(inventory)
            directory = keep or Path(tmp)
            fetched = thermal_fetch.fetch_files(spec, t_since, t_until, directory)
            unreachable = fetched.unreachable
            roles = {n.name: n.role for n in spec.nodes}
            zone_roles = {**spec.thermal.zone_roles, **zone_roles}
        assert directory is not None
        rep, records, stats = report_from_dir(
            directory, since=t_since, until=t_until, roles=roles, head=head,
            zone_roles=zone_roles or None,
        )  # fmt: skip
    if csv_path:
        write_csv(records, csv_path)
    if plot_path:
        write_plot(rep, records, plot_path, zone, zone_roles or None)
    if as_json:
        doc = report_to_json(rep)
        doc["read"] = {
            "records": stats.records,
            "bad_lines": stats.bad_lines,
            "truncated_tail": stats.truncated_tail,
        }
        doc["unreachable"] = unreachable
        doc["tz"] = tz or "UTC"
        doc["since_local"], doc["until_local"] = (
            local_iso(rep.since, zone),
            local_iso(rep.until, zone),
        )
        for node in rep.nodes:
            doc.setdefault("throttle_spans_local", {})[node.node] = [
                [local_iso(a, zone), local_iso(b, zone)] for a, b in node.throttle_spans
            ]
        emit_json("thermal report", {"ok": not unreachable, **doc}, indent=2)
        raise typer.Exit(1 if unreachable else 0)
    console = Console()
    if not rep.nodes or not records:
        console.print(f"no samples in {plain(directory or from_dir)} for this window")
        print_unreachable(console, unreachable)
        raise typer.Exit(1)
    _render(console, rep, zone)
    if stats.bad_lines:
        console.print(
            f"[yellow]skipped {stats.bad_lines} unreadable line(s) ({stats.truncated_tail} truncated at a file end)[/]"
        )
    print_unreachable(console, unreachable)
    for p in (csv_path, plot_path):
        if p:
            console.print(f"wrote {plain(p)}")
    if unreachable:
        raise typer.Exit(1)


def _render(console: Console, rep: FieldReport, zone: tzinfo = UTC) -> None:
    t = Table(title=f"Thermal {span_text(rep.since, rep.until, zone)}, every {rep.interval_s:g} s")
    for col in (
        "node",
        "role",
        "samples",
        "GPU peak",
        "hottest zone",
        "min margin to crit",
        "thermal throttle",
        "gaps",
    ):
        t.add_column(col)
    for n in rep.nodes:
        hz = n.hottest_zone
        t.add_row(
            n.node, n.role, f"{n.samples_received}/{n.samples_expected}",
            fmt_temp(n.gpu_peak_c) if n.gpu_peak_c is not None else f"- ({n.null_reasons.get('gpu_peak_c', '')})",
            f"{fmt_temp(hz.peak_c)} {hz.role or hz.zone}" if hz else "-",
            fmt_temp(n.min_margin_c),
            f"{n.throttle.episodes} ({n.throttle.duration_s:g} s)" if n.throttle.episodes else "none",
            str(len(n.gaps)) if n.gaps else "none",
        )  # fmt: skip
    console.print(t)
    # one row per zone role (or zone, without a role map), one column per node: four nodes fit
    # a phone's 80 columns where seven zone columns did not
    labels = sorted({k for n in rep.nodes for k in n.role_peaks})
    zt = Table(title="Peak per zone role")
    zt.add_column("zone")
    for n in rep.nodes:
        zt.add_column(n.node, no_wrap=True)
    for label in labels:
        zt.add_row(
            label, *(fmt_temp((n.role_peaks.get(label) or {}).get("peak_c")) for n in rep.nodes)
        )
    console.print(zt)
    hv = rep.head_vs_workers
    if hv:
        line = ", ".join(
            f"{k} {fmt_temp(v['head'])} vs {fmt_temp(v['workers_min'])}-{fmt_temp(v['workers_max'])}"
            for k, v in hv.items()
            if k in ("gpu_peak_c", "hottest_zone_c")
        )
        console.print(f"head vs workers: {line}")
    for n in rep.nodes:
        for g in n.gaps:
            console.print(
                f"[yellow]gap[/] {n.node}: {local(g.start, zone)} .. {local(g.end, zone)} ({g.end - g.start:.0f} s, {g.kind}, ~{g.missing} missing)"
            )
