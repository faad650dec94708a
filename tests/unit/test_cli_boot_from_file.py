"""`tpwarden boot --from-file LOG` (and `-` for stdin): where did a copied boot stop, and why."""

from __future__ import annotations

import json
from pathlib import Path

from tpwarden.cluster.cli import app
from typer.testing import CliRunner

BOOT = Path(__file__).parents[1] / "fixtures" / "real" / "boot"


def test_from_file_json_on_a_crash():
    log = BOOT / "v0.10.1_single_free-memory_crash_issue23192.log"
    result = CliRunner().invoke(app, ["boot", "--from-file", str(log), "--json"])
    assert result.exit_code == 1, result.output
    doc = json.loads(result.output)
    assert doc["verdict"] == "failed" and doc["phase"] == "failed"
    assert doc["error_kind"] == "free GPU memory below --gpu-memory-utilization"
    assert "Free memory on device (7.34/139.72 GiB)" in doc["boot_error"]
    assert doc["source"] == str(log)


def test_from_stdin_on_a_success_with_notes():
    text = (BOOT / "v0.20.0_docker-desktop_qwen3.6-nvfp4_success_error-after-ready.log").read_text()
    result = CliRunner().invoke(app, ["boot", "--from-file", "-"], input=text)
    assert result.exit_code == 0, result.output
    out = " ".join(result.output.split())  # rich wraps long lines
    assert "ready" in out and "shards 3/3" in out
    assert "after ready" in out and "does not exist" in out


def test_from_file_on_a_hang_says_where_it_stopped():
    log = BOOT / "v0.6.x_two-node-ray_nccl-hang_issue8447.log"
    result = CliRunner().invoke(app, ["boot", "--from-file", str(log), "--json"])
    assert result.exit_code == 1
    doc = json.loads(result.output)
    assert (doc["verdict"], doc["phase"], doc["boot_error"]) == ("incomplete", "rendezvous", None)
    assert "NCCL INFO Channel 01/02" in doc["last_line"]


def test_from_file_that_does_not_exist_is_bad_input(tmp_path: Path):
    result = CliRunner().invoke(app, ["boot", "--from-file", str(tmp_path / "nope.log")])
    assert result.exit_code == 2


# the lab's real engine on a CPU with AMX (issue 49): each rank's log names its crash on one line
SIGILL_LINES = {
    "v0.32.0_lab-cpu_tp4-nnodes4_sigill_node1.log": (
        0,
        "crash: rank 0 died (no exit code) on the first request",
    ),
    "v0.32.0_lab-cpu_tp4-nnodes4_sigill_node2.log": (
        1,
        "crash: rank 1 died by SIGILL (illegal instruction) after loading its model",
    ),
}


def test_from_file_names_a_crash_on_one_line_of_80_columns():
    for name, (code, expected) in SIGILL_LINES.items():
        result = CliRunner().invoke(
            app, ["boot", "--from-file", str(BOOT / name)], env={"COLUMNS": "80"}
        )
        assert result.exit_code == code, result.output
        (line,) = [ln for ln in result.output.splitlines() if ln.startswith("crash: ")]
        assert line == expected and len(line) <= 80
    # the signal's meaning follows on a line of its own
    result = CliRunner().invoke(
        app, ["boot", "--from-file", str(BOOT / name)], env={"COLUMNS": "80"}
    )
    assert "SIGILL: an instruction this CPU or its container does not allow" in result.output


def test_from_file_json_carries_the_crash():
    log = BOOT / "v0.32.0_lab-cpu_tp4-nnodes4_sigill_node2.log"
    doc = json.loads(CliRunner().invoke(app, ["boot", "--from-file", str(log), "--json"]).output)
    crash = doc["crash"]
    assert (crash["signal"], crash["named"], crash["phase"]) == ("SIGILL", True, "after_load")
    assert [(d["worker"], d["rank"], d["exit_code"]) for d in crash["deaths"]] == [
        ("VllmWorker-1", 1, -4)
    ]
    assert doc["error_kind"] == "SIGILL"


def test_a_healthy_log_prints_no_crash_line():
    log = BOOT / "v0.25.1_single_dflash_success.log"
    result = CliRunner().invoke(app, ["boot", "--from-file", str(log)], env={"COLUMNS": "80"})
    assert result.exit_code == 0 and "crash:" not in result.output
