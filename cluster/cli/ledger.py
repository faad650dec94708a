"""`tpwarden ledger`: the configuration ledger (issue 53). list, show, diff, why, canary, export.

The ledger is read from `--ledger PATH`, else from the inventory's `tpwarden.ledger.path`, else
`<state dir>/ledger/<cluster>.sqlite` (docs/ledger.md). Rendering lives in `ledger_view`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from tpwarden.cluster.cli.common import (
    console,
    emit_json,
    err_console,
    handle_errors,
    load,
    plain,
)
from tpwarden.cluster.cli.ledger_view import (
    diff_lines,
    human,
    plan_lines,
    record_lines,
    when,
    why_lines,
)
from tpwarden.cluster.cli.options import DEFAULT_INVENTORY, InventoryOption, JsonOption
from tpwarden.cluster.durable import default_state_dir
from tpwarden.cluster.errors import ConfigError
from tpwarden.cluster.ledger.export import all_lines, series_lines
from tpwarden.cluster.ledger.record import ledger_file
from tpwarden.cluster.ledger.store import Ledger
from tpwarden.cluster.ledger.tables import CanaryRow
from tpwarden.cluster.ledger.why import why as why_report
from tpwarden.cluster.operations.experiment import write_revert_plan
from tpwarden.cluster.reports.thermal.localtime import parse_tz

app = typer.Typer(
    help="The configuration ledger: what ran when the server was healthy, how well it served, "
    "why it got slower.",
    no_args_is_help=True,
)

LedgerOption = Annotated[
    Path | None,
    typer.Option("--ledger", help="The ledger file (default: from the inventory, docs/ledger.md)."),
]


def _zone(name: str) -> str:
    try:
        parse_tz(name)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    return name


TzOption = Annotated[
    str, typer.Option("--tz", callback=_zone, help="Time zone of the times shown (IANA).")
]


def _open(inventory: Path, ledger: Path | None) -> tuple[Ledger, str | None, int]:
    """(the ledger, read-only; the inventory's cluster, if read; its node count)."""
    if ledger is not None:
        return Ledger.open(ledger, readonly=True), None, 0
    if not inventory.exists():
        found = sorted((default_state_dir() / "ledger").glob("*.sqlite"))
        if len(found) == 1:
            return Ledger.open(found[0], readonly=True), None, 0
        raise ConfigError(
            f"no inventory at {inventory} and {len(found)} ledgers in {default_state_dir()}",
            key="--ledger", hint="give -i INVENTORY or --ledger PATH",
        )  # fmt: skip
    spec = load(inventory)
    return Ledger.open(ledger_file(spec), readonly=True), spec.name, len(spec.nodes)


def _cluster(led: Ledger, cluster: str | None) -> str:
    if cluster is not None:
        return cluster
    latest = led.records(limit=1)
    if not latest:
        raise ConfigError(f"{led.path} holds no record yet", key="--ledger")
    return latest[0].cluster


def _node_count(led: Ledger) -> int:
    """How many nodes the latest record fingerprinted (for "all 4 nodes")."""
    latest = led.records(limit=1)
    return len({r.node for r in led.fingerprint(latest[0].id) if r.node != "*"}) if latest else 0


@handle_errors
def list_(
    inventory: InventoryOption = DEFAULT_INVENTORY,
    ledger: LedgerOption = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="Newest records shown.")] = 20,
    tz: TzOption = "UTC",
    as_json: JsonOption = False,
) -> None:
    """Records, newest first: when the server became healthy, by which action, its
    configuration (cfg:...), how many rows changed, and its latest canary at concurrency 1."""
    led, cluster, _ = _open(inventory, ledger)
    with led:
        recs = led.records(cluster, limit=limit)
        latest: dict[int, CanaryRow] = {}
        for c in led.canaries(cluster):
            if c.record_id is not None:
                latest[c.record_id] = c
    if as_json:
        emit_json("ledger list", {"ok": True, "dry_run": False, "path": str(led.path),
                                  "records": [r.to_json() for r in recs]})  # fmt: skip
        return
    for line in record_lines(recs, latest, parse_tz(tz)):
        console.print(plain(line), highlight=False)


@handle_errors
def show(
    record_id: Annotated[int, typer.Argument(help="A record's id (ledger list).")],
    inventory: InventoryOption = DEFAULT_INVENTORY,
    ledger: LedgerOption = None,
    tz: TzOption = "UTC",
    as_json: JsonOption = False,
) -> None:
    """One record: its fingerprint by node (secrets as the plan shows them), what could not be
    read and why, what changed against the record before, and its canaries."""
    led, _, _ = _open(inventory, ledger)
    with led:
        rec = led.record(record_id)
        if rec is None:
            raise ConfigError(f"no record {record_id} in {led.path}", key="RECORD_ID",
                              hint="ids: tpwarden ledger list")  # fmt: skip
        rows, changes = led.fingerprint(rec.id), led.changes(rec.id)
        canaries = [c for c in led.canaries(rec.cluster) if c.record_id == rec.id]
    if as_json:
        emit_json("ledger show", {
            "ok": True, "dry_run": False, "record": rec.to_json(),
            "fingerprint": [{"node": r.node, "key": r.key, "value": r.value} for r in rows],
            "changes": [c.__dict__ for c in changes], "canaries": [c.to_json() for c in canaries],
        })  # fmt: skip
        return
    z = parse_tz(tz)
    console.print(
        plain(f"record #{rec.id}  {when(rec.ts, z)}  {rec.action}: {rec.reason}"), highlight=False
    )
    console.print(
        plain(f"{rec.cfg}  by {rec.who}  {rec.rows} rows, {rec.changed} changed"), highlight=False
    )
    node = None
    for r in rows:
        if r.node != node:
            node = r.node
            console.print(
                plain(f"[{'cluster and engine' if node == '*' else node}]"), highlight=False
            )
        console.print(
            plain(f"  {r.key} = {human(r.key, r.value)}"), highlight=False, soft_wrap=True
        )
    for k, why in sorted(rec.missing.items()):
        console.print(plain(f"  missing {k}: {why}"), highlight=False, soft_wrap=True)
    for c in canaries:
        tok = c.throughput(1)
        console.print(plain(f"canary #{c.id} {when(c.started, z)} {c.status}"
                            + (f" {tok:.1f} tok/s at c1" if tok else f": {c.reason}")), highlight=False)  # fmt: skip


@handle_errors
def diff(
    a: Annotated[int, typer.Argument(help="The earlier record's id.")],
    b: Annotated[int, typer.Argument(help="The later record's id.")],
    inventory: InventoryOption = DEFAULT_INVENTORY,
    ledger: LedgerOption = None,
    as_json: JsonOption = False,
) -> None:
    """What differs between two records, grouped by subject (one query over their rows)."""
    led, _, nodes = _open(inventory, ledger)
    with led:
        nodes = nodes or _node_count(led)
        for rid in (a, b):
            if led.record(rid) is None:
                raise ConfigError(f"no record {rid} in {led.path}", key="A/B", hint="ledger list")
        changes = led.diff(a, b)
    if as_json:
        emit_json("ledger diff", {"ok": True, "dry_run": False, "a": a, "b": b,
                                  "changes": [c.__dict__ for c in changes]})  # fmt: skip
        return
    for line in diff_lines(changes, nodes):
        console.print(plain(line), highlight=False)


@handle_errors
def why(
    inventory: InventoryOption = DEFAULT_INVENTORY,
    ledger: LedgerOption = None,
    level: Annotated[int, typer.Option("--level", min=1, help="The canary's concurrency.")] = 1,
    tz: TzOption = "UTC",
    plan: Annotated[
        Path | None,
        typer.Option(
            "--plan",
            help="Also write the experiment plan that reverts each revertable difference alone "
            "and all of them together (check it: experiment run FILE --dry-run).",
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Is the latest canary slower than the best earlier one (Welch on log throughput, 95%
    interval, the configuration's own noise), and what differs, most likely first. Exit 0
    within noise or faster, 1 slower, 2 bad input."""
    led, cluster, nodes = _open(inventory, ledger)
    with led:
        rep = why_report(led, _cluster(led, cluster), level=level)
        nodes = nodes or _node_count(led)
    slower = rep.verdict.value == "slower"
    written = write_revert_plan(rep, plan) if plan is not None else None
    if as_json:
        doc = {"ok": not slower, "dry_run": False, **rep.to_json()}
        if written is not None:
            doc["plan"] = {"path": str(plan), **written.to_json()}
        emit_json("ledger why", doc)
    else:
        for line in why_lines(rep, parse_tz(tz), nodes):
            console.print(plain(line), highlight=False)
        if written is not None:
            for line in plan_lines(written, str(plan)):
                console.print(plain(line), highlight=False, soft_wrap=True)
    raise typer.Exit(1 if slower else 0)


@handle_errors
def canary(
    inventory: InventoryOption = DEFAULT_INVENTORY,
    as_json: JsonOption = False,
) -> None:
    """Run one canary now, if the server is idle: a warm-up and the measured repeats per
    level, recorded in the ledger. Exit 0 measured, 1 deferred (user load) or failed (down)."""
    # deferred: the canary pulls the bench client and cluster control (issue 30: --help stays light)
    from tpwarden.cluster.bench.canary import CanaryRunner, CanaryStatus, WatchdogLease
    from tpwarden.cluster.control.controller import Controller

    spec = load(inventory)

    def say(msg: str) -> None:
        if not as_json:
            err_console.print(plain(msg), highlight=False)

    with Controller(spec) as ctl:
        out = CanaryRunner(ctl, lease=WatchdogLease(ctl), on_progress=say).run()
    ok = out.status is CanaryStatus.OK
    if as_json:
        doc = {"ok": ok, "dry_run": False, "canary": out.to_json()}
        if not ok:
            doc["error"] = {"kind": out.status.value, "message": out.reason or "",
                            "hint": "a canary runs only on an idle, healthy server", "exit_code": 1}  # fmt: skip
        emit_json("ledger canary", doc)
    elif ok:
        for lv in out.levels:
            console.print(plain(f"c{lv.level}: {lv.output_tok_s or 0:.1f} tok/s (median of "
                                f"{lv.repeats}), TTFT {lv.ttft_p50_ms or 0:.0f} ms, ITL "
                                f"{lv.itl_p50_ms or 0:.0f} ms"), highlight=False)  # fmt: skip
        console.print(plain(f"canary #{out.canary_id} recorded ({out.cfg}); `tpwarden ledger why`"))
    else:
        err_console.print(plain(f"{out.status.value}: {out.reason}"), highlight=False)
    raise typer.Exit(0 if ok else 1)


@handle_errors
def export(
    inventory: InventoryOption = DEFAULT_INVENTORY,
    ledger: LedgerOption = None,
    jsonl: Annotated[
        bool, typer.Option("--jsonl", help="JSON lines: the format (default).")
    ] = False,
    everything: Annotated[bool, typer.Option("--all", help="Every row of every table.")] = False,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Write here, not stdout.")] = None,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="One JSON document: the lines in `lines` (or, with "
            "--out, how many were written where).",
        ),
    ] = False,
) -> None:
    """The ledger as JSON lines: one line per canary level (time, cfg, definition, level,
    tok/s, TTFT, ITL, acceptance) for a notebook or Apache Otava; --all for every table."""
    led, cluster, _ = _open(inventory, ledger)
    with led:
        lines = list(all_lines(led) if everything else series_lines(led, cluster))
    text = "".join(json.dumps(x, ensure_ascii=False, default=str) + "\n" for x in lines)
    if out is not None:
        out.write_text(text)
    if as_json:
        doc = {"ok": True, "dry_run": False, "count": len(lines), "path": str(led.path)}
        emit_json("ledger export", {**doc, "out": str(out)} if out else {**doc, "lines": lines})
    elif out is None:
        sys.stdout.write(text)
    else:
        err_console.print(plain(f"{len(lines)} lines -> {out}"))


app.command("list")(list_)
app.command("show")(show)
app.command("diff")(diff)
app.command("why")(why)
app.command("canary")(canary)
app.command("export")(export)
