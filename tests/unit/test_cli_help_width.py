"""Help that wraps to the terminal (issue 52 item 12): click caps help at 80 columns, so every
paragraph broke at the same column whatever the terminal's width (at 200 columns, the help of
all commands had 329 line breaks more than it needs). Now a paragraph fills the terminal, and an
example or a table keeps its lines at any width. Run as the command runs (a subprocess with
COLUMNS set): click's test runner forces 80 columns."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def _help(columns: int, *path: str) -> list[str]:
    code = "from tpwarden.cluster.cli import app; app()"
    done = subprocess.run(
        [sys.executable, "-c", code, *path, "--help"],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": str(columns)},
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def _description(lines: list[str]) -> list[str]:
    """The lines between the usage line and the example."""
    body = lines[2 : next(i for i, ln in enumerate(lines) if ln.strip().startswith("Example"))]
    return [ln for ln in body if ln.strip()]


@pytest.mark.parametrize("columns", [100, 200])
def test_a_paragraph_fills_a_wide_terminal(columns: int) -> None:
    lines = _help(columns, "watchdog", "run")
    text = _description(lines)
    assert max(len(ln) for ln in text) > 90  # not capped at 80 columns
    assert all(len(ln) <= columns for ln in text)
    example = [ln for ln in lines if ln.strip().startswith("Example:")]
    assert len(example) == 1 and "--known-hosts /etc/tpwarden/watchdog/known_hosts)" in example[0]


def test_a_narrow_terminal_wraps_sentences_but_not_the_example() -> None:
    lines = _help(60, "restart")
    assert all(len(ln) <= 60 for ln in _description(lines))
    (example,) = [ln for ln in lines if ln.strip().startswith("Example:")]
    assert example.strip().endswith('--reason "engine hung" --yes')  # one line, as written
