"""`tpwarden provision` from the built wheel, with no checkout (issue 18): the README's install
lines (wheel built in a checkout, `~/tpwarden/bin/pip install "...whl[control]"`), PyPI's
`watchdog` beside it, then that venv's
`tpwarden provision` provisions the lab from a directory far from any source tree (the playbooks
come from the package, the nodes' wheel is repacked from the installation), and `--check` right
after reports nothing to change.

The install resolves through pip's configured index (as scripts/setup.sh does), pinned by
requirements/constraints.txt. Runs after tests/lab/test_provision_removal.py, which leaves the
nodes unprovisioned; this module removes what it installed again. Uses the session `lab` fixture.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.lab

ROOT = Path(__file__).resolve().parents[2]
PYPI_WATCHDOG = "watchdog==6.0.0"


def _run(
    argv: list[str], cwd: Path, timeout: float = 900, extra_env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # nothing from the checkout
    env.update(extra_env or {})
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env)


def _ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, f"{done.args}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def readme_install_lines() -> list[str]:
    """The README's install block ("Using it on a real cluster"), line by line, comments off."""
    text = (ROOT / "README.md").read_text()
    (block,) = [b for b in re.findall(r"```sh\n(.*?)```", text, re.S) if "pip wheel" in b]
    lines = [line.split("  #")[0].strip() for line in block.splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    """The README's install lines run as written (issue 28): the wheel built in a checkout (an
    export of this one: what git knows, working-tree edits included), then `~/tpwarden` made
    and the wheel installed with its control extra (HOME is a scratch directory; pip resolves
    through its configured index, pinned by requirements/constraints.txt through
    PIP_CONSTRAINT, as scripts/setup.sh pins). PyPI's `watchdog` goes in beside it."""
    checkout = tmp_path_factory.mktemp("checkout")
    tree = _ok(_run(["bash", "-c", "git stash create || true"], cwd=ROOT)).strip() or "HEAD"
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", tree], capture_output=True,
                             check=True, timeout=120).stdout  # fmt: skip
    subprocess.run(["tar", "-x", "-C", str(checkout)], input=archive, check=True, timeout=120)
    home = tmp_path_factory.mktemp("home")
    env = {"HOME": str(home), "PIP_CONSTRAINT": str(ROOT / "requirements" / "constraints.txt")}
    for line in readme_install_lines():
        _ok(_run(["bash", "-ec", line], cwd=checkout, extra_env=env))
    venv = home / "tpwarden"
    pip = [str(venv / "bin" / "python"), "-m", "pip", "-q", "install"]
    _ok(_run([*pip, "-c", str(ROOT / "requirements" / "constraints.txt"), PYPI_WATCHDOG],
             cwd=checkout))  # fmt: skip
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
