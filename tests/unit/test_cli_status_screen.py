"""The on-call screen shows what matters (issue 30, item 7): a healthy server's boot notes only
with --verbose (or in --json), and the 80-column snapshot of a healthy 4-node cluster fits in 20
lines. Cluster control is a fake with fixed observations (no SSH, no Docker)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from tpwarden.cluster.boot.progress import BootNote, BootProgress, read_boot_log
from tpwarden.cluster.cli import app
from tpwarden.cluster.cli import control as control_cli
from tpwarden.cluster.control.status_model import ClusterStatus, NodeStatus, ServerStatus, Verdict
from typer.testing import CliRunner

GOOD = str(Path(__file__).parent / "inventories" / "good.yml")
NOTES = tuple(
    BootNote("WARNING", f"worker{i}", f"[rank{i}] ulimit too low, eager mode, Triton {i}")
    for i in range(8)
)


class Fake:
    verdict = Verdict.HEALTHY

    def __init__(self, spec, **kw):
        self.spec = spec

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    def boot_progress(self):
        return dataclasses.replace(BootProgress(), notes=NOTES)

    def status(self, timeout_s=None):
        nodes = tuple(
            NodeStatus(f"node{i}", "head" if i == 1 else "worker", True, state="running",
                       config_hash="1f2661cca5ba")
            for i in range(1, 5)
        )  # fmt: skip
        ok = self.verdict is Verdict.HEALTHY
        server = ServerStatus("http://h:8000", 200, probe_ok=ok)
        return ClusterStatus("glm", "1f2661cca5ba", self.verdict, nodes, server, 0.1)


@pytest.fixture()
def fake(monkeypatch):
    class F(Fake):
        pass

    monkeypatch.setattr(control_cli, "Controller", F)
    monkeypatch.setattr(control_cli, "watchdog_line", lambda sd: (None, "watchdog: armed"))
    return F


def _screen(*extra: str):
    return CliRunner().invoke(app, ["status", "-i", GOOD, *extra], terminal_width=80)


def test_a_healthy_status_fits_in_20_lines_without_its_boot_notes(fake):
    result = _screen()
    assert result.exit_code == 0, result.output
    lines = result.stdout.rstrip("\n").splitlines()
    assert len(lines) <= 20, result.stdout
    assert "ulimit" not in result.stdout and "8 boot notes (--verbose shows them)" in result.stdout


def test_verbose_and_json_show_the_notes(fake):
    verbose = _screen("--verbose")
    assert verbose.exit_code == 0 and "ulimit" in verbose.stdout and "[rank0]" in verbose.stdout
    doc = json.loads(_screen("--json").stdout)
    assert len(doc["boot"]["notes"]) == len(NOTES)


def test_an_unhealthy_server_shows_its_notes_unasked(fake):
    fake.verdict = Verdict.HUNG
    result = _screen()
    assert result.exit_code == 1 and "ulimit" in result.stdout


def test_the_heads_crash_shows_on_one_line_when_no_exited_container_named_it(fake):
    # the head's log says a worker died (the lab's SIGILL head, tests/fixtures/real/boot) while
    # no container has exited yet: the screen names it from the head's boot state
    log = (
        Path(__file__).parents[1]
        / "fixtures/real/boot/v0.32.0_lab-cpu_tp4-nnodes4_sigill_node1.log"
    )
    head = read_boot_log(log.read_text().splitlines())
    fake.boot_progress = lambda self: head
    fake.verdict = Verdict.BROKEN
    result = _screen()
    assert "crash: rank 0 died (no exit code) on the first request" in result.stdout.splitlines()
    doc = json.loads(_screen("--json").stdout)
    assert doc["boot"]["crash"]["phase"] == "first_request"
