"""`tpwarden provision` from the built wheel, with no checkout (issue 18): `pip install
'tpwarden[control]'` into a fresh venv that already has PyPI's `watchdog`, then that venv's
`tpwarden provision` provisions the lab from a directory far from any source tree (the playbooks
come from the package, the nodes' wheel is repacked from the installation), and `--check` right
after reports nothing to change.

The install resolves through pip's configured index (as scripts/setup.sh does), pinned by
requirements/constraints.txt. Runs after tests/lab/test_provision.py, which leaves the nodes
unprovisioned; this module removes what it installed again. Uses the session `lab` fixture.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.lab

ROOT = Path(__file__).resolve().parents[2]
PYPI_WATCHDOG = "watchdog==6.0.0"


def _run(argv: list[str], cwd: Path, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # nothing from the checkout
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env)


def _ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, f"{done.args}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done.stdout


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    """The built wheel installed with its control extra, beside PyPI's watchdog."""
    wheels = tmp_path_factory.mktemp("wheel")
    _ok(_run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels),
              str(ROOT)], cwd=wheels))  # fmt: skip
    (wheel,) = wheels.glob("tpwarden-*.whl")
    venv = tmp_path_factory.mktemp("control") / "venv"
    _ok(_run([sys.executable, "-m", "venv", str(venv)], cwd=wheels))
    pip = [str(venv / "bin" / "python"), "-m", "pip", "-q", "install"]
    pip += ["-c", str(ROOT / "requirements" / "constraints.txt")]
    _ok(_run([*pip, PYPI_WATCHDOG], cwd=wheels))
    _ok(_run([*pip, f"{wheel}[control]"], cwd=wheels))
    return venv


@pytest.fixture(scope="module")
def elsewhere(tmp_path_factory) -> Path:
    """A working directory with no tpwarden source anywhere above it."""
    cwd = tmp_path_factory.mktemp("no-checkout")
    assert not any((p / "pyproject.toml").exists() for p in (cwd, *cwd.parents))
    return cwd


def provision(lab, venv: Path, cwd: Path, *args: str) -> dict:
    argv = [str(venv / "bin" / "tpwarden"), "provision", "-i", str(lab.inventory), "--json"]
    done = _run([*argv, *args], cwd=cwd)
    assert done.stdout.strip(), done.stderr[-3000:]
    doc = json.loads(done.stdout)
    doc["exit"] = done.returncode
    return doc


def _describe(doc: dict) -> str:
    return json.dumps({k: doc[k] for k in ("status", "changed", "hosts", "failures")})


@pytest.fixture(scope="module")
def provisioned(lab, venv, elsewhere):
    first = provision(lab, venv, elsewhere)
    yield first
    provision(lab, venv, elsewhere, "--remove")


def test_installed_beside_pypi_watchdog_without_a_checkout(venv, elsewhere):
    probe = (
        "import watchdog.observers, tpwarden.watchdog.policy\n"
        "from tpwarden.cluster.provision import gateway as p\n"
        "print(p.PLAYBOOK_DIR, p.SOURCE_DIR)\n"
    )
    playbooks, source = _ok(_run([str(venv / "bin" / "python"), "-c", probe], elsewhere)).split()
    assert playbooks.startswith(str(venv)) and source == "None"


def test_provision_from_the_wheel_then_check_changes_nothing(lab, venv, elsewhere, provisioned):
    assert provisioned["exit"] == 0 and provisioned["ok"], _describe(provisioned)
    doc = provision(lab, venv, elsewhere, "--check")
    assert doc["exit"] == 0 and doc["ok"] and doc["changed"] == 0, _describe(doc)
