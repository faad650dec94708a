"""`tpwarden incident list/show/capture` (issue 32): human and --json, in the CLI's envelope."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import jsonschema
import pytest
from tpwarden.cluster.cli import app
from tpwarden.cluster.reports.incident import capture
from tpwarden.watchdog.incidents import IncidentStore
from typer.testing import CliRunner

from tests.unit.test_incident_beside import beside, host_blind
from tests.unit.test_incident_capture import nodes_with_pids

SCHEMA = json.loads(
    resources.files("tpwarden.cluster").joinpath("data/cli-envelope.schema.json").read_text()
)


@pytest.fixture
def stored(tmp_path: Path) -> tuple[Path, str]:
    nodes = nodes_with_pids(paused="node3")
    doc = capture(nodes.spec, nodes, "3 consecutive probe failures", pyspy=[])
    return tmp_path, IncidentStore(tmp_path).save(doc)


def run(*argv: str):
    return CliRunner().invoke(app, list(argv))


def test_list_and_show_json_follow_the_envelope(stored: tuple[Path, str]) -> None:
    sd, ident = stored
    listed = run("incident", "list", "--state-dir", str(sd), "--json")
    assert listed.exit_code == 0, listed.output
    doc = json.loads(listed.stdout)
    jsonschema.validate(doc, SCHEMA)
    assert doc["command"] == "incident list" and doc["ok"] is True
    [row] = doc["incidents"]
    assert (row["id"], row["suspect"]) == (ident, "node3")
    shown = run("incident", "show", ident, "--state-dir", str(sd), "--json")
    assert shown.exit_code == 0, shown.output
    doc = json.loads(shown.stdout)
    jsonschema.validate(doc, SCHEMA)
    assert doc["incident"]["id"] == ident
    assert doc["incident"]["verdict"]["suspect"] == "node3"
    assert set(doc["incident"]["nodes"]) == {"node1", "node2", "node3", "node4"}


def test_show_human_names_the_suspect_and_the_stacks(stored: tuple[Path, str]) -> None:
    sd, ident = stored
    out = run("incident", "show", ident, "--state-dir", str(sd))
    assert out.exit_code == 0, out.output
    text = " ".join(out.output.split())
    assert "suspect: node3 (rank 2)" in text
    assert "container paused" in text
    assert "pid 2765 python: T (stopped) wchan=do_signal_stop" in text
    assert "waits in all_reduce (torch/distributed/distributed_c10d.py:3252)" in text
    listed = " ".join(run("incident", "list", "--state-dir", str(sd)).output.split())
    assert ident in listed and "node3" in listed


def test_an_unknown_id_is_one_failure_document_exit_1(tmp_path: Path) -> None:
    out = run("incident", "show", "20990101T000000Z", "--state-dir", str(tmp_path), "--json")
    assert out.exit_code == 1
    doc = json.loads(out.stdout)
    jsonschema.validate(doc, SCHEMA)
    assert doc["ok"] is False and "no incident" in doc["error"]["message"]


def test_an_empty_store_lists_nothing(tmp_path: Path) -> None:
    out = run("incident", "list", "--state-dir", str(tmp_path))
    assert out.exit_code == 0 and "no incident dossiers" in out.output


def test_show_human_marks_a_process_the_freezer_holds(tmp_path: Path) -> None:
    nodes = nodes_with_pids(paused="node3")
    collect = nodes.collect

    def frozen(node, args, sudo):
        out = collect(node, args, sudo)
        out["dossier"]["processes"][0]["frozen"] = node.name == "node3"
        return out

    nodes.collect = frozen
    ident = IncidentStore(tmp_path).save(capture(nodes.spec, nodes, "r", pyspy=[]))
    text = " ".join(run("incident", "show", ident, "--state-dir", str(tmp_path)).output.split())
    assert "pid 2765 python: T (stopped) FROZEN wchan=do_signal_stop" in text
    assert text.count("FROZEN") == 1


def test_show_human_says_when_pids_are_the_containers(tmp_path: Path) -> None:
    """Processes read from a diagnostic container carry the container's PIDs: shown as such."""
    nodes = nodes_with_pids(paused="node3")
    host_blind(nodes)
    nodes.beside = beside
    ident = IncidentStore(tmp_path).save(capture(nodes.spec, nodes, "r"))
    text = " ".join(run("incident", "show", ident, "--state-dir", str(tmp_path)).output.split())
    assert "pid 1 (in the container) python: T (stopped)" in text
    assert "note: processes read from a diagnostic container in the rank's PID namespace" in text
