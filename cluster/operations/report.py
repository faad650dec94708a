"""The morning report's assembly (`tpwarden report`): its sources gathered, then the report.

From a directory (`--from-dir`, or the sample night unpacked), or from the cluster (`-i`): every
node's thermal files over SFTP (`reports.thermal.fetch`), the watchdog's event log from where the
watchdog runs (`watchdog_host.watchdog_events`), cluster control's event log, the bench runs of
this machine and the configuration ledger's canaries (`ledger.record.ledger_file`). A source that
could not be read is named in ``problems``, and the report is made from the rest. The facts come from `reports.morning` (pure); the CLI renders them.
"""

from __future__ import annotations

import dataclasses
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tpwarden.cluster.bench.runner import default_runs_dir
from tpwarden.cluster.durable import JSONValue, default_state_dir
from tpwarden.cluster.inventory.load import load_inventory
from tpwarden.cluster.ledger.record import ledger_file
from tpwarden.cluster.operations.watchdog_host import watchdog_events
from tpwarden.cluster.reports.morning import MorningReport
from tpwarden.cluster.reports.morning_io import Sources, morning_from_files, unpack_sample
from tpwarden.cluster.reports.thermal import (
    fetch as thermal_fetch,  # looked up per call: tests substitute it
)


@dataclass(frozen=True)
class ReportInput:
    """Where the night is read from (exactly one of the three) and how it is read."""

    inventory: Path | None = None
    from_dir: Path | None = None
    sample: bool = False
    since: float | None = None
    until: float | None = None
    head: str | None = None  # with a directory: the head node (others: their agent's role)
    runs_dir: Path | None = None  # bench runs (default: this machine's)
    zone_roles: dict[str, str] | None = None  # given by the operator: over the inventory's


@dataclass(frozen=True)
class Assembled:
    report: MorningReport
    records: list[JSONValue]  # the thermal samples in the window (the plot's)
    problems: dict[str, str]  # source -> why it could not be read
    zone_roles: dict[str, str]  # the zone roles in force (the inventory's and the operator's)


def assemble(given: ReportInput) -> Assembled:
    """Gather the night's sources and make its report (module doc)."""
    roles_map = dict(given.zone_roles or {})
    problems: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="tpwarden-report-") as tmp:
        from_dir = unpack_sample(Path(tmp) / "sample") if given.sample else given.from_dir
        roles: dict[str, str] | None
        if from_dir is not None:
            src = Sources.from_dir(from_dir)
            roles = {given.head: "head"} if given.head else None
        else:
            assert given.inventory is not None
            spec = load_inventory(given.inventory)
            fetched = thermal_fetch.fetch_files(spec, given.since, given.until, tmp)
            problems.update(fetched.unreachable)
            roles = {n.name: n.role for n in spec.nodes}
            roles_map = {**spec.thermal.zone_roles, **roles_map}
            (Path(tmp) / "watchdog").mkdir()
            events, unread = watchdog_events(spec, Path(tmp) / "watchdog")
            if unread:
                problems["watchdog"] = unread
            control_events = default_state_dir() / "events.jsonl"
            src = Sources(events, Path(tmp), default_runs_dir(), control_events, ledger_file(spec))
        if given.runs_dir is not None:
            src = dataclasses.replace(src, runs_dir=given.runs_dir)
        if not src.events.is_file() and "watchdog" not in problems:
            problems["watchdog"] = f"no event log at {src.events}"
        rep, records = morning_from_files(
            src, since=given.since, until=given.until, roles=roles, zone_roles=roles_map or None
        )
    return Assembled(rep, list(records), problems, roles_map)
