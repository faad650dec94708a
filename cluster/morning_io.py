"""Files in for the morning report: the watchdog's event log, cluster control's restart log,
the thermal agents' JSON lines and the bench run directories (with the tune runs' tune.json). Nothing here decides anything;
``morning.build_morning`` does."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tpwarden.cluster.durable import read_jsonl
from tpwarden.cluster.morning import MorningReport, build_morning, iso_ts
from tpwarden.cluster.morning_tune import TuneSummary, tune_summary
from tpwarden.node.thermal.writer import read_records
from tpwarden.watchdog.events import read_events
from tpwarden.watchdog.thermal.export import files_in


@dataclass(frozen=True)
class Sources:
    events: Path  # the watchdog's events.jsonl
    thermal_dir: Path  # thermal-<node>-YYYYMMDD*.jsonl of every node
    runs_dir: Path | None = None  # bench run directories
    control_events: Path | None = None  # cluster control's events.jsonl (operator restarts)

    @classmethod
    def from_dir(cls, root: str | os.PathLike[str]) -> Sources:
        """One directory laid out as events.jsonl, thermal/, runs/ (what --from-dir reads)."""
        root = Path(root)
        return cls(
            root / "events.jsonl",
            root / "thermal" if (root / "thermal").is_dir() else root,
            root / "runs",
            root / "control-events.jsonl",
        )


def load_runs(runs_dir: Path | None) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(manifest, table) of every complete run directory; half-written ones are skipped."""
    if runs_dir is None or not runs_dir.is_dir():
        return []
    out = []
    for d in sorted(p for p in runs_dir.iterdir() if p.is_dir()):
        try:
            out.append(
                (
                    json.loads((d / "manifest.json").read_text()),
                    json.loads((d / "table.json").read_text()),
                )
            )
        except (OSError, ValueError):
            continue
    return out


def load_tunes(runs_dir: Path | None) -> list[TuneSummary]:
    """Every run directory with a `tune.json` (a `tune drafter` run) whose manifest says when it
    started; half-written ones are skipped."""
    if runs_dir is None or not runs_dir.is_dir():
        return []
    out = []
    for d in sorted(p for p in runs_dir.iterdir() if (p / "tune.json").is_file()):
        try:
            manifest = json.loads((d / "manifest.json").read_text())
            doc = json.loads((d / "tune.json").read_text())
        except (OSError, ValueError):
            continue
        started = iso_ts(manifest.get("started_at"))
        if started is not None and isinstance(doc, dict):
            out.append(tune_summary(str(manifest.get("run_id") or d.name), started, doc))
    return out


def operator_restarts(path: Path | None) -> list[dict[str, Any]]:
    """Cluster control's restart records made by people; the watchdog's own restarts are in
    its event log already (with their cause), so they are left out here."""
    if path is None or not path.is_file():
        return []
    out = []
    for r in read_jsonl(path):
        if r.get("event") != "restart" or "watchdog" in str(r.get("who") or ""):
            continue
        ts = iso_ts(r.get("ts"))
        if ts is not None:
            out.append({**r, "ts": ts})
    return out


def morning_from_files(
    src: Sources,
    *,
    since: float | None,
    until: float | None,
    roles: Mapping[str, str] | None = None,
    zone_roles: Mapping[str, str] | None = None,
    events_from: float | None = None,
) -> tuple[MorningReport, list[dict[str, Any]]]:
    """The report and the thermal records in its window (for the plot). `events_from` leaves
    older event records unread (a daemon reading its own log keeps its memory small)."""
    got = read_events(str(src.events), since=events_from)
    records, _stats = read_records(files_in(src.thermal_dir))
    rep = build_morning(
        got.events,
        records,
        load_runs(src.runs_dir),
        since=since,
        until=until,
        roles=roles,
        zone_roles=zone_roles,
        operator_restarts=operator_restarts(src.control_events),
        skipped_lines=got.skipped_lines,
        tune_runs=load_tunes(src.runs_dir),
    )
    window = [r for r in records if rep.since <= r.get("ts", -1) <= rep.until]
    return rep, window
