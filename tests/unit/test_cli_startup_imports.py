"""Fast start (issue 30, item 3): `tpwarden --help`, a TAB completion of a command name and
`inventory check` import only what they need; the lab, Docker, paramiko and Ansible never load
for --help (each is a fresh interpreter: sys.modules after the command ran)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROBE = """
import json, sys
sys.argv = ["tpwarden", *json.loads(sys.argv[1])]
from tpwarden.cluster.cli import app
try:
    app()
except SystemExit:
    pass
sys.stderr.write("\\nMODULES " + json.dumps(sorted(sys.modules)))
"""
HEAVY = ("tpwarden.lab", "docker", "paramiko", "ansible", "requests")


def _modules(argv: list[str], **env: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(argv)],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=120,
    )
    return set(json.loads(done.stderr.rsplit("MODULES ", 1)[1]))


def _heavy(mods: set[str]) -> list[str]:
    return sorted(m for m in mods if m.split(".")[0] in HEAVY or m.startswith(HEAVY))


@pytest.mark.parametrize("argv", [["--help"], ["watchdog", "--help"], ["--version"]])
def test_help_imports_no_lab_docker_paramiko_ansible(argv):
    mods = _modules(argv)
    assert "tpwarden.cluster.cli" in mods
    assert not _heavy(mods), _heavy(mods)


def test_completing_a_command_name_imports_no_command_module():
    mods = _modules(
        [], _TPWARDEN_COMPLETE="complete_bash", COMP_WORDS="tpwarden wat", COMP_CWORD="1"
    )
    assert not _heavy(mods), _heavy(mods)
    assert not [m for m in mods if m.startswith("tpwarden.cluster.cli.watchdog")]


def test_inventory_check_loads_neither_the_lab_nor_docker():
    mods = _modules(["inventory", "check", "-i", str(ROOT / "inventory.example.yml")])
    assert "tpwarden.cluster.inventory.load" in mods  # it did run
    assert not [m for m in mods if m.startswith(("tpwarden.lab", "docker", "requests"))]


def _completed(words: str, cword: str) -> tuple[list[str], set[str]]:
    """What `tpwarden` offers for COMP_WORDS / COMP_CWORD (bash), and the modules it loaded."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, "[]"],
        capture_output=True,
        text=True,
        env={**os.environ, "_TPWARDEN_COMPLETE": "complete_bash", "COMP_WORDS": words,
             "COMP_CWORD": cword},
        timeout=120,
    )  # fmt: skip
    return done.stdout.split(), set(json.loads(done.stderr.rsplit("MODULES ", 1)[1]))


TAB_HEAVY = ("pydantic", "pydantic_core", "httpx", "tpwarden.cluster.settings")


@pytest.mark.parametrize(
    ("words", "cword", "offered"),
    [
        ("tpwarden ", "1", ["plan", "rollout", "watchdog", "eval"]),
        ("tpwarden wat", "1", ["watchdog"]),
        ("tpwarden watchdog h", "2", ["hold", "history"]),
        ("tpwarden watchdog ", "2", ["run", "status", "hold", "release", "history"]),
        ("tpwarden eval datasets ", "3", ["fetch", "load"]),
    ],
)
def test_completing_a_command_name_imports_neither_pydantic_nor_httpx_nor_the_settings(
    words, cword, offered
):
    """Sub-command names complete from the tables (`COMMANDS`, `completion_table`): no command
    module, no typer coercion (pydantic), no settings, no httpx."""
    got, mods = _completed(words, cword)
    assert [name for name in got if name in offered] == offered, got
    loaded = [m for m in mods if m in TAB_HEAVY or m.split(".")[0] in TAB_HEAVY]
    assert not loaded, loaded
    assert not [m for m in mods if m.startswith("tpwarden.cluster.cli.") and m.count(".") > 3]
    assert not _heavy(mods), _heavy(mods)


def test_completing_a_watchdog_option_reads_state_without_httpx():
    """`tpwarden watchdog hold --<TAB>` loads the watchdog command module (and with it the state
    file's types) but not httpx: the probe's plain types live in
    `tpwarden.cluster.vllm.probe_types`. (It used to be `watchdog h<TAB>`, which now completes
    from the table and imports neither.)"""
    got, mods = _completed("tpwarden watchdog hold --", "3")
    assert "--for" in got and "--reason" in got
    assert "tpwarden.watchdog.state" in mods  # the path that used to reach httpx did run
    assert "tpwarden.cluster.vllm.probe_types" in mods
    assert "tpwarden.cluster.vllm.probe" not in mods
    assert not [m for m in mods if m.split(".")[0] == "httpx"]
    assert not _heavy(mods), _heavy(mods)
