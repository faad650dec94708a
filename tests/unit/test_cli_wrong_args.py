"""Every command given wrong arguments: an error that names the argument, exit 2, no traceback.

No case may reach a node: each is refused while arguments and the inventory are checked (the
inventory points at closed ports on 127.0.0.1 in case one ever gets that far).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tpwarden.cluster.cli import app
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def inv(tmp_path_factory) -> Path:
    text = (ROOT / "inventory.example.yml").read_text()
    for i in range(1, 5):
        text = text.replace(
            f"ansible_host: 10.0.0.1{i}", f"ansible_host: 127.0.0.1\n          ansible_port: {i}"
        )
    path = tmp_path_factory.mktemp("walk") / "inv.yml"
    path.write_text(text)
    return path


WRONG = [
    (["logs", "-i", "{inv}", "node9"], "no node 'node9'"),
    (["logs", "-i", "{inv}", "node1", "--tail", "-1"], "--tail"),
    (["status", "-i", "{inv}", "--watch", "-1"], "--watch"),
    (["status", "-i", "{inv}", "--watch", "abc"], "--watch"),
    (["status", "-i", "{inv}", "--timeout", "-1"], "--timeout"),
    (["up", "-i", "{inv}", "--timeout", "-5"], "--timeout"),
    (["restart", "-i", "{inv}", "-y", "--timeout", "-1"], "--timeout"),
    (["boot", "-i", "{inv}", "--timeout", "0"], "--timeout"),
    (["watchdog", "hold", "-i", "{inv}", "--for", "xyz", "--reason", "r"], "--for"),
    (["watchdog", "hold", "-i", "{inv}", "--for", "-5m", "--reason", "r"], "--for"),
    (["watchdog", "history", "-i", "{inv}", "--limit", "-1"], "--limit"),
    (["thermal", "report", "-i", "{inv}", "--since", "garbage"], "garbage"),
    (["thermal", "report", "--from-dir", "/nonexistent/tpwarden"], "--from-dir"),
    (["thermal", "watch", "-i", "{inv}", "--count", "-1"], "--count"),
    (["thermal", "watch", "-i", "{inv}", "--every", "0"], "--every"),
    (["thermal", "agent", "--node", "n", "--interval", "0"], "--interval"),
    (["thermal", "agent", "--node", "n", "--budget-mb", "0"], "--budget-mb"),
    (["bench", "sweep", "-i", "{inv}", "--concurrency", "a,b", "--dry-run"], "concurrency"),
    (["bench", "sweep", "-i", "{inv}", "--concurrency", "-1", "--dry-run"], "concurrency"),
    (["bench", "sweep", "-i", "{inv}", "--num-prompts", "0", "--dry-run"], "--num-prompts"),
    (["bench", "prefill", "-i", "{inv}", "--input-len", "-1", "--dry-run"], "input-len"),
    (["clocks", "cap", "-i", "{inv}", "--", "-5"], "mhz"),
    (["clocks", "cap", "-i", "{inv}", "abc"], "mhz"),
    (["rollback", "-i", "{inv}", "999", "-y"], "no config revision 999"),
    (["inventory", "check", "-i", "/nonexistent/inv.yml"], "file not found"),
    (["plan", "-i", "/nonexistent/inv.yml"], "file not found"),
    (["provision", "-i", "/nonexistent/inv.yml"], "file not found"),
    (["provision", "-i", "{inv}", "--tags", "nope", "--check"], "unknown tag"),
]


@pytest.mark.parametrize(("argv", "says"), WRONG, ids=[" ".join(a[:2]) for a, _ in WRONG])
def test_wrong_arguments_exit_2_without_traceback(inv, argv, says):
    argv = [a.replace("{inv}", str(inv)) for a in argv]
    result = CliRunner().invoke(app, argv)
    assert isinstance(result.exception, SystemExit), result.exception  # not a traceback
    assert result.exit_code == 2, result.output
    assert says in result.output.replace("\n", " ").replace("│", " ")


def test_errors_not_about_a_file_are_not_labelled_inventory(inv):
    result = CliRunner().invoke(app, ["logs", "-i", str(inv), "node9"])
    assert "<inventory>" not in result.output
    assert result.output.startswith("error: NODE: no node 'node9'")


def test_user_text_is_never_terminal_markup(inv, tmp_path, monkeypatch):
    """A model path with [/] and [conceal] prints as written; an unknown key named [/oops]
    is reported, not a rich MarkupError."""
    text = inv.read_text().replace(
        "path: /models/GLM-5.3-Flash-NVFP4", "path: /models/[/]x[conceal]hidden"
    )
    from tpwarden.cluster.cli.common import console

    monkeypatch.setattr(console, "_width", 1000)  # no folding inside a table cell
    marked = tmp_path / "marked.yml"
    marked.write_text(text)
    result = CliRunner().invoke(app, ["plan", "-i", str(marked)], terminal_width=400)
    assert result.exit_code == 0, result.output
    assert "/models/[/]x[conceal]hidden --tensor-parallel-size" in result.output
    bad = tmp_path / "oops.yml"
    bad.write_text(
        inv.read_text().replace("      port: 8000\n", '      port: 8000\n      "[/oops]": 1\n')
    )
    result = CliRunner().invoke(app, ["inventory", "check", "-i", str(bad)], terminal_width=400)
    assert result.exit_code == 2
    assert "tpwarden.[/oops]: unknown key" in result.output
