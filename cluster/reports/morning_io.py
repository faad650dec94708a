"""Files in for the morning report: the watchdog's event log, cluster control's restart log,
the thermal agents' JSON lines and the bench run directories (with the tune runs' tune.json). Nothing here decides anything;
``morning.build_morning`` does."""

from __future__ import annotations

import io
import json
import os
import tarfile
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from tpwarden.cluster.durable import JSONObject, read_jsonl
from tpwarden.cluster.event_log import read_events
from tpwarden.cluster.reports.morning import MorningReport, build_morning, iso_ts
from tpwarden.cluster.reports.morning_ledger import load_canaries
from tpwarden.cluster.reports.morning_tune import TuneSummary, tune_summary
from tpwarden.cluster.reports.thermal.export import files_in
from tpwarden.node.thermal.writer import read_records

# The sample night `tpwarden report --sample` shows (package data, written by
# tools/sample_night.py): 20 minutes of a 4-node cluster from 22:00 KST, 2026-12-02.
SAMPLE_NIGHT = "sample-night.tar.gz"
SAMPLE_TZ = "Asia/Seoul"
SAMPLE_HEAD = "node1"
SAMPLE_ZONE_ROLES = {"0": "SoC", "1": "P-cores", "3": "E-cores", "5": "GPU zone"}


def unpack_sample(dest: Path) -> Path:
    """The sample night's files under ``dest`` (laid out as --from-dir reads them). Only
    regular files with plain relative names are written."""
    data = resources.files("tpwarden.cluster").joinpath("data", SAMPLE_NIGHT).read_bytes()
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        for member in tar.getmembers():
            parts = Path(member.name).parts
            if not member.isfile() or member.name.startswith("/") or ".." in parts:
                raise ValueError(f"{SAMPLE_NIGHT}: unexpected entry {member.name!r}")
            target = dest.joinpath(*parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            source = tar.extractfile(member)
            assert source is not None  # a regular file
            target.write_bytes(source.read())
    return dest


@dataclass(frozen=True)
class Sources:
    events: Path  # the watchdog's events.jsonl
    thermal_dir: Path  # thermal-<node>-YYYYMMDD*.jsonl of every node
    runs_dir: Path | None = None  # bench run directories
    control_events: Path | None = None  # cluster control's events.jsonl (operator restarts)
    ledger: Path | None = None  # the configuration ledger (its canaries)

    @classmethod
    def from_dir(cls, root: str | os.PathLike[str]) -> Sources:
        """One directory laid out as events.jsonl, thermal/, runs/ (what --from-dir reads)."""
        root = Path(root)
        return cls(
            root / "events.jsonl",
            root / "thermal" if (root / "thermal").is_dir() else root,
            root / "runs",
            root / "control-events.jsonl",
            root / "ledger.sqlite",
        )


def load_runs(runs_dir: Path | None) -> list[tuple[JSONObject, JSONObject]]:
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


def operator_restarts(path: Path | None) -> list[JSONObject]:
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
) -> tuple[MorningReport, list[JSONObject]]:
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
        canaries=load_canaries(src.ledger, since or 0.0, until or float("inf")),
    )
    window = [r for r in records if rep.since <= r.get("ts", -1) <= rep.until]
    return rep, window
