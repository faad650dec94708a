"""`tpwarden thermal zones`: every node's zones with type, current and trip temperatures and
how each one moved over the last minutes (from the agents' samples), to help write the
inventory's `thermal.zone_roles`. Run it after a short load (e.g. `tpwarden bench sweep
--concurrency 32`) so the zones that follow the GPU or the CPU stand out."""

from __future__ import annotations

import dataclasses
import tempfile
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table
from tpwarden.cluster.cli.common import emit_json, handle_errors, load, plain, positive
from tpwarden.cluster.errors import ConfigError
from tpwarden.cluster.reports.thermal import (
    fetch as thermal_fetch,  # looked up per call: tests substitute it
)
from tpwarden.cluster.reports.thermal.export import files_in
from tpwarden.cluster.reports.thermal.survey import survey
from tpwarden.node.thermal.writer import read_records


def _c(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


commands = typer.Typer()  # `thermal zones`, mounted by `cli.thermal`


@commands.command("zones")
@handle_errors
def zones(
    inventory: Annotated[
        Path | None, typer.Option("--inventory", "-i", help="Read every node's files (SFTP).")
    ] = None,
    from_dir: Annotated[
        Path | None, typer.Option("--from-dir", help="Directory of thermal-*.jsonl files.")
    ] = None,
    minutes: Annotated[
        float, typer.Option(callback=positive, help="Look back this far (covers the load).")
    ] = 10.0,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Per node and zone: type, role (if mapped), current, min/max and rise over the window,
    trip points, and correlation with the GPU temperature (near 1: follows the GPU)."""
    if (inventory is None) == (from_dir is None):
        raise ConfigError("give exactly one of --inventory/-i and --from-dir", key="--from-dir")
    until = time.time()
    since = until - minutes * 60
    roles: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="tpwarden-zones-") as tmp:
        directory = from_dir
        unreachable: dict[str, str] = {}
        if inventory is not None:
            spec = load(inventory)
            roles = dict(spec.thermal.zone_roles)
            fetch = thermal_fetch.fetch_files(spec, since, until, tmp)
            unreachable = fetch.unreachable
            directory = Path(tmp)
        assert directory is not None
        records, _ = read_records(files_in(directory))
    if from_dir is not None and records:  # a copied directory: its own newest minutes
        until = max(r["ts"] for r in records)
        since = until - minutes * 60
    rows = survey([r for r in records if since <= r.get("ts", -1) <= until], roles)
    code = 1 if unreachable or not rows else 0
    if as_json:
        docs = [{**dataclasses.asdict(r), "rise_c": r.rise_c} for r in rows]
        emit_json("thermal zones", {"ok": code == 0, "zones": docs, "unreachable": unreachable})
        raise typer.Exit(code)
    console = Console()
    if not rows:
        console.print(f"no zone samples in the last {minutes:g} minutes")
    for node in dict.fromkeys(r.node for r in rows):
        t = Table(title=f"{node}: zones over the last {minutes:g} min", title_justify="left")
        for col in ("zone", "type", "role", "now °C", "min-max °C", "rise", "GPU corr", "trips °C"):
            t.add_column(col, no_wrap=col != "trips °C")
        for r in (r for r in rows if r.node == node):
            trips = ", ".join(f"{k} {v:g}" for k, v in r.trips.items()) or "-"
            t.add_row(
                r.zone.replace("thermal_zone", "tz"), r.type or "-", r.role or "-",
                _c(r.current_c), f"{_c(r.min_c)}-{_c(r.max_c)}", _c(r.rise_c),
                "-" if r.gpu_corr is None else f"{r.gpu_corr:+.2f}", trips,
            )  # fmt: skip
        console.print(t)
    for node, why in sorted(unreachable.items()):
        console.print(f"[red]{plain(node)}: not read ({plain(why)})[/]")
    console.print(
        "map zones in the inventory: thermal: {zone_roles: {'5': 'GPU zone', '1': 'P-cores'}}",
        highlight=False,
        markup=False,
    )
    raise typer.Exit(code)


__all__ = ["zones"]
