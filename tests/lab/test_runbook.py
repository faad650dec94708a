"""docs/runbook.md, executed: for every symptom with a lab rehearsal, inject the fault with the
runbook's own commands and check that `tpwarden status --json` shows the verdict and note the
runbook promises; then undo it with the runbook's commands."""

from __future__ import annotations

import json
import re
import shlex
import time
from pathlib import Path

import pytest
from tpwarden.cluster.control.controller import Controller
from tpwarden.cluster.inventory.load import load_inventory

from tests.lab.conftest import tpwarden

pytestmark = pytest.mark.lab
RUNBOOK = Path(__file__).resolve().parents[2] / "docs" / "runbook.md"
SECTION = re.compile(r"^## (?P<title>.+?)\n(?P<body>.*?)(?=^## |\Z)", re.M | re.S)
REHEARSE = re.compile(r"\*\*Rehearse on the lab:\*\* (?P<cmds>.+)")
SHOWS = re.compile(
    r"\*\*`tpwarden status` shows:\*\* verdict `(?P<verdict>\w+)`(?:; note `(?P<note>[^`]+)`)?"
)
UNDO = re.compile(r"\*\*Undo on the lab:\*\* (?P<cmds>.+)")


def _commands(text: str) -> list[str]:
    return re.findall(r"`([^`]+)`", text)


def symptoms() -> list[tuple[str, list[str], str, str | None, list[str]]]:
    out = []
    for m in SECTION.finditer(RUNBOOK.read_text()):
        body = m.group("body")
        rehearse, shows, undo = REHEARSE.search(body), SHOWS.search(body), UNDO.search(body)
        if rehearse:
            assert shows and undo, f"runbook section {m.group('title')!r} is incomplete"
            out.append(
                (m.group("title"), _commands(rehearse.group("cmds")), shows.group("verdict"),
                 shows.group("note"), _commands(undo.group("cmds")))
            )  # fmt: skip
    return out


def test_runbook_has_rehearsals_for_the_symptoms():
    titles = [s[0] for s in symptoms()]
    assert len(titles) >= 5, titles


def _run(cmd: str, inv: Path) -> None:
    argv = shlex.split(cmd.replace("$INV", str(inv)))
    assert argv[0] == "tpwarden", cmd
    result = tpwarden(*argv[1:], timeout_s=300)
    assert result.returncode == 0, f"{cmd}: {result.stdout}{result.stderr}"


def _status(inv: Path) -> dict:
    result = tpwarden("status", "-i", str(inv), "--json", timeout_s=120)
    return json.loads(result.stdout)


@pytest.mark.timeout(900)
@pytest.mark.parametrize("symptom", symptoms(), ids=lambda s: s[0])
def test_status_shows_what_the_runbook_says(lab, symptom):
    title, rehearse, verdict, note, undo = symptom
    inv = Path(lab.inventory)
    with Controller(load_inventory(inv)) as ctl:
        assert ctl.up(timeout_s=180, replace=True).ok
    try:
        for cmd in rehearse:
            _run(cmd, inv)
        deadline = time.monotonic() + 90
        while True:
            doc = _status(inv)
            if doc["verdict"] == verdict and (note is None or note in doc["notes"]):
                break
            if time.monotonic() > deadline:
                pytest.fail(
                    f"{title}: status shows {doc['verdict']} {doc['notes']}, runbook says {verdict} {note!r}"
                )
            time.sleep(2)
    finally:
        for cmd in undo:
            _run(cmd, inv)
    with Controller(load_inventory(inv)) as ctl:
        assert (
            ctl.up(timeout_s=180, replace=True).ok
            or ctl.restart("after rehearsal", timeout_s=180).ok
        )
