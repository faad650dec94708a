"""Usage before the network (issue 52 item 11): every file a command will write and every file
it reads is checked before anything is contacted. A bad one exits 2 with one `error:` line, and
no connection is made (a listener on the socket layer counts the attempts)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tpwarden.cluster.cli import app
from typer.testing import CliRunner

from tests.unit import test_cli_wrong_usage as wrong_usage

inv = wrong_usage.inv  # the fixtures: an inventory on closed loopback ports, no network
no_network = wrong_usage.no_network
_one_error_line = wrong_usage._one_error_line

WRONG = [
    (["report", "-i", "{inv}", "--html", "/proc/x.html"], "--html"),
    (["report", "-i", "{inv}", "--plot", "/proc/x.png"], "--plot"),
    (["thermal", "report", "-i", "{inv}", "--plot", "/proc/x.png"], "--plot"),
    (["thermal", "report", "-i", "{inv}", "--csv", "{tmp}/nowhere/x.csv"], "--csv"),
    (["thermal", "report", "-i", "{inv}", "--keep", "/proc/kept"], "--keep"),
    (["tune", "drafter", "-i", "{inv}", "--plot", "/proc/x.png"], "--plot"),
    (["decide", "calibrate", "-i", "{inv}", "--data", "{tmp}/items.jsonl", "--out",
      "/proc/cal.json"], "--out"),
    (["decide", "run", "-i", "{inv}", "--data", "/nonexistent/items.jsonl"], "--data"),
    (["decide", "ask", "-i", "{inv}", "q?", "--choice", "A=x", "--choice", "B=y",
      "--calibration", "/nonexistent/cal.json"], "--calibration"),
    (["bench", "sweep", "-i", "{inv}", "--prompts", "/nonexistent/p.jsonl"], "--prompts"),
    (["prometheus", "config", "-i", "{inv}", "-o", "/proc/tpwarden.yml"], "--out"),
    (["eval", "datasets", "fetch", "--out", "/proc/x.tar.gz"], "--out"),
    (["provision", "-i", "{inv}", "--vault-password-file", "/nonexistent/pw"],
     "--vault-password-file"),
    (["boot", "--from-file", "{tmp}/other.log"], "not a vLLM log"),
    (["boot", "--from-file", "/bin/sh"], "not a vLLM log"),
]  # fmt: skip


@pytest.mark.parametrize(("argv", "says"), WRONG, ids=[" ".join(a[:2]) + " " + s for a, s in WRONG])
def test_a_bad_file_is_refused_before_any_connection(
    argv, says, inv, tmp_path, monkeypatch, no_network
):
    monkeypatch.setenv("TPWARDEN_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("TPWARDEN_RUNS_DIR", str(tmp_path / "runs"))
    (tmp_path / "items.jsonl").write_text('{"id": "1", "question": "q", "choices": {"A": "x"}}\n')
    # another program's log: levels and dates, nothing of vLLM's
    (tmp_path / "other.log").write_text("INFO 2026 server started\nWARNING disk at 91%\n")
    args = [a.replace("{inv}", str(inv)).replace("{tmp}", str(tmp_path)) for a in argv]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    _one_error_line(result.stderr, says)
    assert no_network == []
    assert not Path("/proc/kept").exists() and not (tmp_path / "nowhere").exists()
