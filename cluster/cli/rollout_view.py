"""How a rollout's record looks on the terminal and in --json, and its progress lines: shared by
`tpwarden rollout`/`rollback` and `tune drafter --apply`, which runs a rollout too."""

from __future__ import annotations

from collections.abc import Callable

from rich.table import Table
from tpwarden.cluster.cli.common import console, emit_json, err_console, plain
from tpwarden.cluster.durable import JSONObject
from tpwarden.cluster.rollout.sequence import RolloutRecord


def progress(as_json: bool) -> Callable[[str, JSONObject], None]:
    """The rollout's steps as lines: on stdout, or on stderr when stdout carries --json."""

    def on_event(kind: str, data: JSONObject) -> None:
        detail = (
            f": {data['reason']}"
            if data.get("reason") and kind in ("rolling_back", "rolled_back", "failed")
            else ""
        )
        # with --json, stdout carries one document; progress goes to stderr
        (err_console if as_json else console).print(
            f"[bold]rollout[/] {kind}{detail}", highlight=False
        )

    return on_event


def render_record(record: RolloutRecord, as_json: bool = False, command: str = "rollout") -> int:
    code = 0 if record.step == "done" else 1
    if as_json:
        emit_json(command, {"ok": code == 0, "dry_run": False, "record": record.__dict__})
        return code
    table = Table(title=f"rollout {record.id}: {record.step}")
    table.add_column("concurrency")
    table.add_column("metric")
    table.add_column("before")
    table.add_column("after")
    table.add_column("change")
    before = (record.baseline or {}).get("rows", {})
    after = (record.after or {}).get("rows", {})
    for c in sorted(set(before) | set(after), key=int):
        for metric in sorted(set(before.get(c, {})) | set(after.get(c, {}))):
            b, a = before.get(c, {}).get(metric), after.get(c, {}).get(metric)
            change = f"{(a - b) / b * 100:+.1f}%" if a is not None and b else ""
            table.add_row(str(c), metric, _f(b), _f(a), change)
    if before or after:
        console.print(table)
    for v in record.verdicts:
        console.print(
            f"guard {plain(v['guard'])}: {'[green]ok[/]' if v['ok'] else '[red]failed[/]'} "
            f"({plain(v['detail'])})"
        )
    for line in record.summary:
        console.print(f"change: {line}", highlight=False, markup=False)
    colour = {"done": "green", "rolled_back": "yellow"}.get(record.step, "red")
    console.print(
        f"[{colour}]{record.step}[/] config {record.old_hash} -> {record.new_hash}"
        + (f": {plain(record.reason)}" if record.reason else "")
    )
    return code


def _f(v: float | None) -> str:
    return "" if v is None else f"{v:.4g}"
