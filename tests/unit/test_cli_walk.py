"""A walk over the whole command line: every command that acts or reports takes --json, and
exit codes are exactly the README's (0 all well, 1 failed or unhealthy, 2 bad input).

Cluster control is replaced by a fake Controller with fixed observations, so the walk runs the
real CLI layer (parsing, rendering, exit codes) without SSH or Docker.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tpwarden.cluster.cli import app
from tpwarden.cluster.cli import control as control_cli
from tpwarden.cluster.cli.common import SCHEMA_VERSION
from tpwarden.cluster.cli.lazy import walk
from tpwarden.cluster.control.status_model import Verdict
from typer.main import get_command
from typer.testing import CliRunner

from .fake_controller import FakeController

GOOD = str(Path(__file__).parent / "inventories" / "good.yml")
MISSING = "/nonexistent/inventory.yml"

# Commands that only serve other commands or humans at a terminal (no document to print).
NO_JSON = {
    ("logs",), ("boot",), ("thermal", "agent"), ("thermal", "watch"), ("watchdog", "run"),
    ("watchdog", "hold"), ("watchdog", "release"), ("lab", "up"), ("lab", "down"),
    ("lab", "inventory"), ("provision",), ("lab", "fault"),
}  # fmt: skip


def _commands(cmd):
    """Every runnable command of the CLI's own tree (lazy groups resolved)."""
    for path, sub in walk(cmd):
        if not getattr(sub, "commands", None) or getattr(sub, "invoke_without_command", False):
            yield path, sub


def _needs_json(path) -> bool:
    return not any(path[: len(p)] == p for p in NO_JSON) and path[-1:] != ("examples",)


def test_every_acting_or_reporting_command_takes_json():
    missing = []
    for path, cmd in _commands(get_command(app)):
        if not path or not _needs_json(path):
            continue
        opts = {o for p in cmd.params for o in getattr(p, "opts", [])}
        if "--json" not in opts:
            missing.append(" ".join(path))
    assert not missing, f"commands without --json: {missing}"


def test_the_walk_covers_the_commands_the_issue_names():
    paths = {p for p, _ in _commands(get_command(app))}
    for need in [("up",), ("down",), ("restart",), ("rollout",), ("rollback",), ("report",)]:
        assert need in paths and _needs_json(need), need


@pytest.mark.parametrize(
    "args",
    [
        ["up", "-i", MISSING, "--dry-run"],
        ["down", "-i", MISSING, "--dry-run", "--json"],
        ["restart", "-i", MISSING, "--dry-run"],
        ["status", "-i", MISSING, "--json"],
        ["rollout", "-i", MISSING, "--set", "drafter.num_speculative_tokens=3", "--dry-run"],
        ["rollback", "-i", MISSING, "--yes", "--json"],
        ["plan", "-i", MISSING, "--json"],
        ["restart", "-i", GOOD, "--json"],  # --json without --yes: bad input, nothing run
        ["rollout", "-i", GOOD, "--set", "x=1", "--bench", "fast"],
        ["rollout", "-i", GOOD, "--guard", "c=32 vibes >= 5%", "--set", "x=1"],
        ["report", "--from-dir", "/nonexistent-dir"],
        ["report", "--from-dir", ".", "--tz", "Mars/Olympus"],
        ["bench", "sweep", "-i", GOOD, "--concurrency", "one", "--dry-run"],
    ],
)
def test_bad_input_exits_2(args):
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, (args, result.output)


# --- fixed observations behind the shared fake Controller (fake_controller.py) ------------
@pytest.fixture()
def fake(monkeypatch, tmp_path):
    Fake = FakeController.factory()  # its own class: the knobs a test sets stay in that test
    monkeypatch.setattr(control_cli, "Controller", Fake)
    monkeypatch.setattr(
        control_cli, "watchdog_line", lambda sd: (None, "watchdog: no state (test)")
    )
    return Fake


def _doc(result) -> dict:
    doc = json.loads(result.stdout)
    assert doc["schema_version"] == SCHEMA_VERSION
    return doc


@pytest.mark.parametrize("command", ["up", "down", "restart"])
def test_dry_run_json_is_one_document_and_exit_0(fake, command):
    result = CliRunner().invoke(app, [command, "-i", GOOD, "--dry-run", "--json"])
    assert result.exit_code == 0, result.output
    doc = _doc(result)
    assert doc["command"] == command and doc["dry_run"] is True
    assert [s["node"] for s in doc["plan"]["steps"]] == ["node1", "node2", "node3", "node4"]


def test_up_dry_run_refused_plan_exits_1_never_3(fake):
    fake.refused = True
    result = CliRunner().invoke(app, ["up", "-i", GOOD, "--dry-run", "--json"])
    assert result.exit_code == 1
    assert _doc(result)["ok"] is False and _doc(result)["plan"]["refused"] is True
    plain = CliRunner().invoke(app, ["up", "-i", GOOD, "--dry-run"])
    assert plain.exit_code == 1


@pytest.mark.parametrize("command", ["up", "down", "restart"])
def test_apply_json_and_exit_codes(fake, command):
    extra = ["--yes"] if command == "restart" else []
    ok = CliRunner().invoke(app, [command, "-i", GOOD, "--json", *extra])
    assert ok.exit_code == 0, ok.output
    assert _doc(ok)["ok"] is True and len(_doc(ok)["outcomes"]) == 4
    fake.fail_node = "node3"
    bad = CliRunner().invoke(app, [command, "-i", GOOD, "--json", *extra])
    assert bad.exit_code == 1
    failed = [o for o in _doc(bad)["outcomes"] if not o["ok"]]
    assert failed == [{"node": "node3", "ok": False, "message": "docker: 500 Server Error"}]


def test_status_json_and_exit_codes(fake):
    ok = CliRunner().invoke(app, ["status", "-i", GOOD, "--json"])
    assert ok.exit_code == 0 and _doc(ok)["verdict"] == "healthy"
    fake.verdict = Verdict.HUNG
    bad = CliRunner().invoke(app, ["status", "-i", GOOD, "--json"])
    assert bad.exit_code == 1 and _doc(bad)["verdict"] == "hung"
    text = CliRunner().invoke(app, ["status", "-i", GOOD, "--wide"])
    assert text.exit_code == 1 and "node4" in text.stdout


def test_rollout_dry_run_json(tmp_path, monkeypatch):
    monkeypatch.setenv("TPWARDEN_STATE_DIR", str(tmp_path))
    inv = tmp_path / "inv.yml"
    inv.write_text(Path(GOOD).read_text())
    result = CliRunner().invoke(
        app,
        ["rollout", "-i", str(inv), "--set", "drafter.num_speculative_tokens=5", "--dry-run",
         "--json", "--guard", "c=8 acceptance >= -10%"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    doc = _doc(result)
    assert doc["command"] == "rollout" and doc["dry_run"] is True
    assert "num_speculative_tokens" in doc["diff"]
    assert doc["record"]["guards"] == ["c=8 acceptance >= -10%"]


def test_bench_dry_run_prints_json_only_when_asked():
    plain = CliRunner().invoke(app, ["bench", "sweep", "-i", GOOD, "--dry-run"])
    assert plain.exit_code == 0, plain.output
    with pytest.raises(ValueError):
        json.loads(plain.stdout)
    asked = CliRunner().invoke(app, ["bench", "sweep", "-i", GOOD, "--dry-run", "--json"])
    assert asked.exit_code == 0 and len(_doc(asked)["containers"]) == 5


@pytest.mark.parametrize(
    "args", [["plan", "-i", GOOD, "--json"], ["inventory", "check", "-i", GOOD, "--json"]]
)
def test_reporting_commands_carry_the_schema_version(args):
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert _doc(result)["command"] == " ".join(
        a for a in args if not a.startswith("-") and a != GOOD
    )
