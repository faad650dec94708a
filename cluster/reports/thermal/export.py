"""Files in and out for the report: load a directory of agent files, write CSV, PNG and JSON.

``report_from_dir`` is the whole local-files core (the all-nodes CLI fetches files first and
then calls it)."""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Iterable, Mapping
from datetime import UTC, tzinfo
from pathlib import Path
from typing import Any

from tpwarden.cluster.durable import atomic_write_bytes, atomic_write_text
from tpwarden.cluster.reports.thermal.report import (
    FieldReport,
    build_report,
    filter_window,
    report_to_json,
)
from tpwarden.node.thermal.records import iso_utc
from tpwarden.node.thermal.writer import ReadStats, read_records

CSV_GPU_FIELDS = ("temp_c", "sm_clock_mhz", "power_w", "util_pct", "memory_used_mib", "fan_pct")


def files_in(directory: str | os.PathLike[str]) -> list[Path]:
    return sorted(Path(directory).glob("thermal-*.jsonl"))


def report_from_dir(
    directory: str | os.PathLike[str],
    *,
    since: float | None = None,
    until: float | None = None,
    roles: Mapping[str, str] | None = None,
    head: str | None = None,
    zone_roles: Mapping[str, str] | None = None,
) -> tuple[FieldReport, list[dict[str, Any]], ReadStats]:
    """Read every ``thermal-*.jsonl`` under ``directory`` and build the report for the window.
    ``head`` names the head node (every other node is then a worker); ``roles`` overrides.
    Returns the report, the windowed records (for CSV and plot) and the reader's stats."""
    records, stats = read_records(files_in(directory))
    recs = [dict(r) for r in filter_window(records, since, until)]
    if head is not None and roles is None:
        names = {str(r.get("node")) for r in recs} | {head}
        roles = {n: "head" if n == head else "worker" for n in names}
    rep = build_report(recs, since=since, until=until, roles=roles, zone_roles=zone_roles)
    return rep, recs, stats


def csv_rows(records: Iterable[Mapping[str, Any]]) -> Iterable[list[Any]]:
    """One row per (node, ts, sensor): value, or empty with the null reason."""
    yield ["node", "ts", "ts_iso", "sensor", "value", "null_reason"]
    for r in sorted(records, key=lambda r: (str(r.get("node")), r["ts"])):
        base = [r.get("node"), r["ts"], r.get("ts_iso") or iso_utc(r["ts"])]
        for g in r.get("gpus") or []:
            for f in CSV_GPU_FIELDS:
                v = g.get(f)
                why = (g.get("null_reasons") or {}).get(f, "") if v is None else ""
                yield base + [f"gpu{g.get('index')}.{f}", "" if v is None else v, why]
        for z in r.get("zones") or []:
            v = z.get("temp_c")
            why = (z.get("null_reasons") or {}).get("temp_c", "") if v is None else ""
            yield base + [f"{z['name']}[{z.get('type')}].temp_c", "" if v is None else v, why]
        for h in r.get("hwmon") or []:
            v = h.get("temp_c")
            why = (h.get("null_reasons") or {}).get("temp_c", "") if v is None else ""
            name = f"{h['chip']}.{h['sensor']}[{h.get('chip_name')}{'/' + h['label'] if h.get('label') else ''}]"
            yield base + [f"{name}.temp_c", "" if v is None else v, why]


def write_csv(records: Iterable[Mapping[str, Any]], path: str | os.PathLike[str]) -> Path:
    path = Path(path)
    buf = io.StringIO(newline="")
    csv.writer(buf).writerows(csv_rows(records))
    atomic_write_text(path, buf.getvalue(), mode=0o644)
    return path


def write_json(rep: FieldReport, path: str | os.PathLike[str]) -> Path:
    path = Path(path)
    atomic_write_text(path, json.dumps(report_to_json(rep), indent=2) + "\n", mode=0o644)
    return path


def write_plot(
    rep: FieldReport,
    records: Iterable[Mapping[str, Any]],
    path: str | os.PathLike[str],
    tz: tzinfo = UTC,
    zone_roles: Mapping[str, str] | None = None,
) -> Path:
    """PNG: one panel per node (GPU and zones in °C, critical trip, throttle episodes)."""
    # deferred: plot loads matplotlib (the `control` extra, ~0.6 s); only PNG exports need it
    from tpwarden.cluster.reports.thermal.plot import figure_png, thermal_figure

    data = figure_png(thermal_figure(rep, records, tz, zone_roles))
    path = Path(path)
    atomic_write_bytes(path, data, mode=0o644)
    return path
