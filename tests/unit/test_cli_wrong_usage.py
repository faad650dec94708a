"""The wrong usages issue 30 lists: each exits 2 with one `error:` line (no traceback, no box)
and contacts nothing (any socket connect fails the test), creates no directory or lock; the
two "operation failed" cases exit 1 with one line."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from tpwarden.cluster.cli import app
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def inv(tmp_path) -> Path:
    text = (ROOT / "inventory.example.yml").read_text()
    for i in range(1, 5):
        text = text.replace(
            f"ansible_host: 10.0.0.1{i}", f"ansible_host: 127.0.0.1\n          ansible_port: {i}"
        )
    path = tmp_path / "inv.yml"
    path.write_text(text)
    return path


@pytest.fixture()
def no_network(monkeypatch):
    """Any connection attempt is recorded and refused: exit 2 must mean nothing was contacted."""
    tried: list[object] = []

    def refuse(self, address, *a, **kw):
        tried.append(address)
        raise ConnectionRefusedError(f"test: no network ({address})")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    return tried


def _files(tmp_path: Path) -> Path:
    (tmp_path / "empty.log").write_text("")
    (tmp_path / "inv-copy.yml").write_text("cluster:\n  name: x\nnodes: [a, b]\n")
    (tmp_path / "night").mkdir()
    return tmp_path


WRONG = [
    (["bench", "sweep", "-i", "{inv}", "--backend", "nosuch", "--dry-run"], "--backend"),
    (["eval", "run", "-i", "{inv}", "--tasks", "gsm8k", "--limit", "-3"], "--limit"),
    (["eval", "run", "-i", "{inv}", "--tasks", "gsm8k", "--resume", "/nonexistent"], "--resume"),
    (["eval", "run", "-i", "{inv}", "--include-path", "/nonexistent"], "--include-path"),
    (["decide", "ask", "-i", "{inv}", "q?", "--choice", "A=x", "--choice", "B=y",
      "--top-logprobs", "-1"], "--top-logprobs"),
    (["decide", "ask", "-i", "{inv}", "q?", "--choice", "A=x", "--choice", "A=y"], "given twice"),
    (["decide", "yesno", "-i", "{inv}", "q?", "--timeout", "0"], "--timeout"),
    (["thermal", "zones", "-i", "{inv}", "--minutes", "-5"], "--minutes"),
    (["boot", "--from-file", "{tmp}/empty.log"], "empty log"),
    (["boot", "--from-file", "{tmp}/inv-copy.yml"], "not a vLLM log"),
    (["report", "--from-dir", "{tmp}/night", "--html", "/nonexistent/dir/x.html"], "--html"),
    (["report", "--from-dir", "{tmp}/night", "--plot", "/nonexistent/dir/x.png"], "--plot"),
    (["watchdog", "release", "--state-dir", "{tmp}/nowhere/x"], "no watchdog state directory"),
    (["watchdog", "hold", "--state-dir", "{tmp}/nowhere/x", "--for", "30m", "--reason",
      "maint [/etc/ssh] window"], "no watchdog state directory"),
    (["rollback", "-i", "{inv}", "nosuchrev", "--yes"], "no config revision nosuchrev"),
    (["status", "-i", "{inv}", "--json", "--timeout", "-1"], "--timeout"),
]  # fmt: skip


def _argv(argv: list[str], inv: Path, tmp: Path) -> list[str]:
    return [a.replace("{inv}", str(inv)).replace("{tmp}", str(tmp)) for a in argv]


def _one_error_line(stderr: str, says: str) -> None:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    assert says in lines[0], stderr
    assert "Traceback" not in stderr and "╭" not in stderr


@pytest.mark.parametrize(("argv", "says"), WRONG, ids=[" ".join(a[:2]) for a, _ in WRONG])
def test_wrong_usage_exits_2_with_one_line_and_contacts_nothing(
    argv, says, inv, tmp_path, monkeypatch, no_network
):
    state = tmp_path / "state"
    monkeypatch.setenv("TPWARDEN_STATE_DIR", str(state))
    monkeypatch.setenv("TPWARDEN_RUNS_DIR", str(tmp_path / "runs"))
    result = CliRunner().invoke(app, _argv(argv, inv, _files(tmp_path)))
    assert isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == 2, result.output
    _one_error_line(result.stderr, says)
    assert no_network == []  # nothing was contacted
    assert not (tmp_path / "nowhere").exists()  # nothing was created
    assert not list(state.rglob("*.lock")) if state.exists() else True


def test_an_empty_report_window_says_no_data_and_exits_1(tmp_path):
    (tmp_path / "night").mkdir()
    result = CliRunner().invoke(
        app, ["report", "--from-dir", str(tmp_path / "night"), "--since", "22:00"]
    )
    assert result.exit_code == 1
    _one_error_line(result.stderr, "no data for 22:00 - now")
    assert "1 Jan" not in result.output


def test_logs_of_an_unreachable_node_exit_1(inv):
    result = CliRunner().invoke(app, ["logs", "-i", str(inv), "node1", "--tail", "5"])
    assert result.exit_code == 1, result.output
    _one_error_line(result.stderr, "node1: not read")
