"""The playbooks and roles pass ansible-lint's production profile, run as CI runs it (the
pinned ansible-lint of the test extra, offline, warnings fatal), with no rule skipped globally."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOKS = ROOT / "playbooks"
LINT_ARGS = ["--profile", "production", "--offline", "--strict", "--nocolor", "-f", "pep8"]

pytestmark = pytest.mark.slow


def _lint(project: Path) -> subprocess.CompletedProcess[str]:
    """ansible-lint on a playbooks directory (its ansible.cfg, site.yml, remove.yml, roles/)."""
    try:
        import ansiblelint  # noqa: F401  (installed by the test extra, pinned in constraints)
    except ImportError:  # pragma: no cover - a broken setup, not a lint result
        pytest.fail("ansible-lint is not installed next to this Python (pip install '.[test]')")
    return subprocess.run(
        [sys.executable, "-m", "ansiblelint", *LINT_ARGS],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=240,
    )


def test_playbooks_pass_the_production_profile():
    done = _lint(PLAYBOOKS)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-6000:]
    assert "Profile 'production' was required, and it passed" in output, output[-2000:]
    # every playbook and role file was linted, not a subset
    processed = int(re.search(r"in (\d+) files processed", output).group(1))
    yaml_files = [p for p in PLAYBOOKS.rglob("*.yml")]
    assert processed >= len(yaml_files), (processed, len(yaml_files))


def test_a_violation_fails_the_check(tmp_path: Path):
    """The check above can fail: a copy of the playbooks with one task lacking a file mode (the
    risky-file-permissions rule) and an unprefixed role variable does not pass."""
    project = tmp_path / "playbooks"
    shutil.copytree(PLAYBOOKS, project)
    tasks = project / "roles/baseline/tasks/main.yml"
    tasks.write_text(
        tasks.read_text() + "\n- name: A directory without a mode\n  ansible.builtin.file:\n"
        "    path: /tmp/x\n    state: directory\n  register: not_prefixed\n"
    )
    done = _lint(project)
    output = done.stdout + done.stderr
    assert done.returncode != 0, output[-2000:]
    assert "risky-file-permissions" in output and "var-naming[no-role-prefix]" in output, output


def test_no_rule_is_skipped_globally_and_every_noqa_names_its_rule():
    for config in (".ansible-lint", ".config/ansible-lint.yml", ".ansible-lint.yml"):
        for base in (ROOT, PLAYBOOKS):
            path = base / config
            if path.exists():
                text = path.read_text()
                assert "skip_list" not in text and "warn_list" not in text, path
    for path in PLAYBOOKS.rglob("*.yml"):
        for line in path.read_text().splitlines():
            if re.search(r"#\s*noqa", line):  # a skip: one named rule, at the end of a line
                assert re.search(r" # noqa: [a-z-]+(\[[a-z-]+\])?$", line), (path, line)
