"""One JSON contract (issue 30, item 1): every command that takes --json prints exactly one
document on stdout, success or failure, and it validates against the JSON Schema shipped in the
package. The commands come from the CLI's own tree, so a new command cannot escape the walk.

Failure mode: an inventory that does not exist (and, where a command needs more, arguments
that name nothing), so no case reaches the network."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import jsonschema
import pytest
from tpwarden.cluster.cli import app
from tpwarden.cluster.cli.lazy import walk
from typer.main import get_command
from typer.testing import CliRunner

from tests.unit import test_cli_wrong_usage as wrong_usage

GOOD = str(Path(__file__).parent / "inventories" / "good.yml")
MISSING = "/nonexistent/tpwarden/inventory.yml"
SCHEMA = json.loads(
    resources.files("tpwarden.cluster").joinpath("data/cli-envelope.schema.json").read_text()
)


def _json_commands():
    for path, cmd in walk(get_command(app)):
        opts = {o for p in cmd.params for o in getattr(p, "opts", [])}
        # the lab (a development tool, one per machine) is never run from unit tests
        if path and path[0] != "lab" and "--json" in opts and not getattr(cmd, "commands", None):
            yield path, cmd


JSON_COMMANDS = list(_json_commands())


def _failing_argv(path, cmd) -> list[str]:
    """``path --json`` with the inventory missing and every required parameter naming nothing."""
    argv = [*path, "--json"]
    for param in cmd.params:
        opts = getattr(param, "opts", [])
        if "--inventory" in opts:
            argv += ["-i", MISSING]
        elif param.required and param.param_type_name == "argument":
            argv.append("/nonexistent/tpwarden/x")
        elif param.required:
            argv += [opts[0], "/nonexistent/tpwarden/x"]
    if path == ("report",) or path[:2] == ("thermal", "report"):
        argv += ["--from-dir", "/nonexistent/tpwarden"]
    if path in {("restart",), ("rollback",), ("rollout",)}:
        argv.append("--yes")
    if path == ("prometheus", "rules"):  # no inventory: its input is where it writes
        argv += ["-o", "/proc/tpwarden/rules.yml"]  # not writable, even by root
    return argv


def _one_document(result) -> dict:
    doc = json.loads(result.stdout)  # exactly one document: json.loads refuses a second one
    jsonschema.validate(doc, SCHEMA)
    return doc


def test_the_walk_finds_the_commands_that_print_json():
    names = {" ".join(p) for p, _ in JSON_COMMANDS}
    for need in ("boot", "plan", "provision", "decide run", "thermal report", "status", "up"):
        assert need in names, need
    assert len(JSON_COMMANDS) >= 30


@pytest.mark.parametrize(
    ("path", "cmd"), JSON_COMMANDS, ids=[" ".join(p) for p, _ in JSON_COMMANDS]
)
def test_failure_is_one_enveloped_document(path, cmd, tmp_path, monkeypatch):
    monkeypatch.setenv("TPWARDEN_STATE_DIR", str(tmp_path))
    monkeypatch.setenv("TPWARDEN_RUNS_DIR", str(tmp_path / "runs"))
    argv = _failing_argv(path, cmd)
    result = CliRunner().invoke(app, argv)
    assert isinstance(result.exception, SystemExit), (argv, result.exception)
    assert result.exit_code in (1, 2), (argv, result.output)
    doc = _one_document(result)
    assert doc["ok"] is False and doc["error"]["exit_code"] == result.exit_code, doc
    assert doc["command"] == " ".join(path)
    assert "Traceback" not in result.output


def test_a_usage_error_with_json_is_enveloped_too():
    result = CliRunner().invoke(app, ["status", "-i", GOOD, "--timeout", "-1", "--json"])
    assert result.exit_code == 2
    doc = _one_document(result)
    assert doc["error"]["kind"] == "usage" and "--timeout" in doc["error"]["message"]
    assert doc["command"] == "status"


@pytest.mark.parametrize(
    "argv",
    [
        ["plan", "-i", GOOD, "--json"],
        ["inventory", "check", "-i", GOOD, "--json"],
        ["bench", "sweep", "-i", GOOD, "--dry-run", "--json"],
        ["tune", "drafter", "-i", GOOD, "--dry-run", "--apply", "--json"],
    ],
)
def test_success_documents_validate(argv):
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 0, result.output
    doc = _one_document(result)
    assert doc["ok"] is True and "error" not in doc


def test_boot_from_file_is_enveloped(tmp_path):
    log = tmp_path / "head.log"
    log.write_text(
        "INFO 12-01 22:00:00 api_server.py:1] Starting vLLM API server on http://0:8000\n"
    )
    result = CliRunner().invoke(app, ["boot", "--from-file", str(log), "--json"])
    doc = _one_document(result)
    assert doc["command"] == "boot" and doc["ok"] is (result.exit_code == 0)
    assert doc["source"] == str(log)


def test_watchdog_views_are_enveloped(tmp_path):
    for sub in ("status", "history"):
        result = CliRunner().invoke(app, ["watchdog", sub, "--state-dir", str(tmp_path), "--json"])
        assert result.exit_code == 0, result.output
        assert _one_document(result)["command"] == f"watchdog {sub}"


# --- issue 52 item 10: a cluster that does not answer ---------------------------------------
inv = wrong_usage.inv  # the example inventory, every node on a closed loopback port


def _unreachable_argv(path, cmd, inventory: Path) -> list[str]:
    argv = [*path, "--json"]
    for param in cmd.params:
        opts = getattr(param, "opts", [])
        if "--inventory" in opts:
            argv += ["-i", str(inventory)]
        elif param.required and param.param_type_name == "argument":
            argv.append("x")
        elif param.required:
            argv += [opts[0], "x"]
    if path in {("restart",), ("rollback",), ("rollout",)}:
        argv.append("--yes")
    if path == ("rollout",):
        argv += ["--set", "drafter.num_speculative_tokens=2"]
    if path == ("status",):
        argv += ["--timeout", "1"]
    return argv


def test_schema_requires_the_error_of_a_failure():
    doc = {"schema_version": 1, "command": "status", "ok": False, "dry_run": False}
    with pytest.raises(jsonschema.ValidationError, match="'error' is a required property"):
        jsonschema.validate(doc, SCHEMA)
    jsonschema.validate({**doc, "ok": True}, SCHEMA)


@pytest.mark.parametrize(
    ("path", "cmd"), JSON_COMMANDS, ids=[" ".join(p) for p, _ in JSON_COMMANDS]
)
def test_against_an_unreachable_cluster_every_failure_says_why(
    path, cmd, inv, tmp_path, monkeypatch
):
    """Every command's document against a cluster whose nodes refuse the connection: a failure
    carries its `error` (17 commands printed "ok": false with none), valid against the schema."""
    monkeypatch.setenv("TPWARDEN_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("TPWARDEN_RUNS_DIR", str(tmp_path / "runs"))
    argv = _unreachable_argv(path, cmd, inv)
    result = CliRunner().invoke(app, argv)
    assert result.exit_code in (0, 1, 2), (argv, result.output)
    doc = _one_document(result)
    assert doc["ok"] is (result.exit_code == 0), (argv, doc)
    if not doc["ok"]:
        assert doc["error"]["message"] and doc["error"]["exit_code"] == result.exit_code, doc
