"""Text is text (issue 29, item 9): user, log and inventory text printed by the CLI is never read
as rich markup. `[/x]` (a closing tag with no opening: MarkupError), `[bold]` (would vanish and
restyle) and `[link=...]` (would vanish) go through every renderer reachable without a network
and must come out as written."""

from __future__ import annotations

import json
import time

import pytest
from rich.console import Console
from tpwarden.cluster.boot.progress import BootNote, BootProgress
from tpwarden.cluster.cli import app, common
from tpwarden.cluster.cli import boot as boot_cli
from tpwarden.cluster.control.results import BootResult
from typer.testing import CliRunner

MARKS = ["[/x]", "[bold]", "[link=https://example.invalid]", "[rank1]", "[/models/GLM]"]
TEXT = "maint " + " ".join(MARKS) + " window"


@pytest.fixture()
def wide(monkeypatch):
    for console in (common.console, common.err_console):
        monkeypatch.setattr(console, "_width", 1000)


def _has_all(output: str) -> None:
    flat = output.replace("\n", "")
    for mark in MARKS:
        assert mark in flat, (mark, output)


def test_plain_is_the_one_escaping_helper():
    console = Console(width=200, record=True)
    console.print(f"[red]x[/] {common.plain(TEXT)}")
    _has_all(console.export_text())


def test_watchdog_hold_status_history_print_the_reason_as_written(tmp_path, wide):
    sd = str(tmp_path)
    hold = CliRunner().invoke(
        app, ["watchdog", "hold", "--state-dir", sd, "--for", "30m", "--reason", TEXT]
    )
    assert hold.exit_code == 0, hold.output
    _has_all(hold.stdout)
    with open(tmp_path / "events.jsonl", "a") as f:
        f.write(json.dumps({"ts": time.time(), "kind": "alert", "detail": TEXT}) + "\n")
    history = CliRunner().invoke(app, ["watchdog", "history", "--state-dir", sd])
    assert history.exit_code == 0, history.output
    _has_all(history.stdout)
    as_json = CliRunner().invoke(app, ["watchdog", "history", "--state-dir", sd, "--json"])
    assert TEXT in json.dumps(json.loads(as_json.stdout)["events"])


def test_boot_failure_reason_and_notes_keep_their_brackets(capsys, wide):
    progress = BootProgress()
    boot_cli.report_boot(BootResult(False, progress, 12.7, reason=f"[rank1]: {TEXT}"))
    note = BootNote("WARNING", "[rank1]", TEXT)
    boot_cli.print_notes([note])
    out = capsys.readouterr()
    _has_all(out.out + out.err)


def test_a_saved_log_path_with_brackets_prints(tmp_path, wide):
    # The screen names the file (its basename); --json keeps the whole path: both as written.
    folder = tmp_path / "[bold]logs[link=y]"
    folder.mkdir()
    log = folder / "[red]head[link=z].log"
    log.write_text("INFO 12-01 22:00:00 api_server.py:1] loading [link=x] weights\n")
    result = CliRunner().invoke(app, ["boot", "--from-file", str(log)])
    assert "[red]head[link=z].log" in result.output.replace("\n", ""), result.output
    assert "[link=x]" in result.output
    assert "MarkupError" not in result.output
    as_json = CliRunner().invoke(app, ["boot", "--from-file", str(log), "--json"])
    assert json.loads(as_json.output)["source"] == str(log)


def test_an_error_line_quotes_user_text_as_written(wide):
    result = CliRunner().invoke(app, ["inventory", "check", "-i", f"/nonexistent/{MARKS[0]}.yml"])
    assert result.exit_code == 2
    assert f"/nonexistent/{MARKS[0]}.yml" in result.output


def test_report_notes_and_unread_sources(tmp_path, wide):
    night = tmp_path / "night"
    (night / "thermal").mkdir(parents=True)
    (night / "events.jsonl").write_text(
        json.dumps({"ts": time.time() - 60, "kind": "probe", "outcome": "ok", "detail": TEXT})
        + "\n"
    )
    result = CliRunner().invoke(app, ["report", "--from-dir", str(night), "--since", "00:00"])
    assert "MarkupError" not in result.output and result.exit_code in (0, 1), result.output


def test_boot_reason_survives_a_crashing_markup_example():
    """The reproduction of the issue: `[/etc/ssh]` alone used to raise MarkupError."""
    console = Console(width=200, record=True)
    console.print(f"restarts held: {common.plain('maint [/etc/ssh] window')}")
    assert "maint [/etc/ssh] window" in console.export_text()
