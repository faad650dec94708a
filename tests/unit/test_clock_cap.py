"""The clock cap as NVML really allows it (issue 28): the lock call's answer, recorded on the
node by the collector, is the only proof of a cap; the pure reading of the collector's report.

The collector runs in child processes against the lab's NVML stand-in (pynvml keeps one NVML
library per process); the reading is pure and tested in-process.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tpwarden.cluster.control.status_model import NodeStatus, ServerStatus, Verdict, derive_verdict
from tpwarden.cluster.reports.status_view import clock_cap_summary
from tpwarden.lab.nvml.build import LIBRARY_NAME, build_nvml_stub
from tpwarden.node.clockcap import (
    CLOCK_CAP_TOLERANCE_MHZ,
    LockAnswer,
    annotate_gpus,
    make_record,
    read_cap,
    read_record,
    recorded_cap,
)

ROOT = Path(__file__).resolve().parents[2]
STATE = """\
gpu_name=NVIDIA GB10
uuid=GPU-0000-cap
temp_c=60
sm_clock_natural_mhz=2411
sm_clock_max_mhz=3003
power_mw=41230
energy_mj=5000000
util_pct=90
pstate=0
"""
T = 1_800_000_000.0  # 2027-01-15T08:00:00Z
WHEN = "2027-01-15T08:00:00Z"
needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the lock call needs root")


# ---- the collector on the stand-in -------------------------------------------------------------
@pytest.fixture(scope="module")
def stub_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_nvml_stub(tmp_path_factory.getbasetemp() / "nvml-stub")  # shared, cached


@pytest.fixture()
def node(stub_lib: Path) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="tpwarden-cap-"))
    path.chmod(0o755)
    shutil.copy(stub_lib, path / LIBRARY_NAME)
    (path / "state").write_text(STATE)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def collector(node: Path, *args: str) -> tuple[int, dict[str, Any]]:
    env = {
        **os.environ,
        "TPWARDEN_LAB_GPU_STATE": str(node / "state"),
        "TPWARDEN_CLOCK_CAP_RECORD": str(node / "run" / "clock-cap.json"),
        "PYTHONPATH": str(ROOT),
    }
    argv = [sys.executable, "-m", "tpwarden.node.collector"]
    argv += ["--nvml-lib", str(node / LIBRARY_NAME), *args]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert proc.stdout.strip(), proc.stderr
    return proc.returncode, json.loads(proc.stdout)


@needs_gcc
@needs_root
def test_cap_records_the_lock_calls_answer_and_show_reads_it_back_from_the_record(
    node: Path,
) -> None:
    rc, _ = collector(node, "show")
    assert rc == 0
    rc, capped = collector(node, "cap", "2000")
    assert rc == 0 and capped["ok"]
    record = capped["clock_cap"]["record"]
    assert record["ok"] and record["action"] == "cap" and record["mhz"] == 2000
    assert record["gpus"] == [{"index": 0, "answer": "SUCCESS", "code": 0, "message": None}]
    path = node / "run" / "clock-cap.json"
    assert json.loads(path.read_text()) == record  # stored on the node...
    assert stat.S_IMODE(path.stat().st_mode) == 0o644  # ...readable by an unprivileged `show`
    rc, shown = collector(node, "show")
    assert rc == 0 and shown["clock_cap"]["record"] == record
    (gpu,) = shown["gpus"]
    assert gpu["locked_clock_max_mhz"] == 2000 and gpu["sm_clock_mhz"] == 2000
    assert "locked_clock_max_mhz" not in gpu["missing"]
    reading = read_cap(shown)
    assert (reading.state, reading.mhz, reading.violations) == ("set", 2000, {})
    assert reading.text.startswith("2000 MHz set at ") and "NVML has no read-back" in reading.text
    rc, reset = collector(node, "reset")
    assert rc == 0 and reset["clock_cap"]["record"]["action"] == "reset"
    rc, shown = collector(node, "show")
    assert shown["gpus"][0]["locked_clock_max_mhz"] is None
    assert read_cap(shown).state == "reset"


@needs_gcc
@pytest.mark.parametrize(
    ("told", "message"),
    [("NOT_SUPPORTED", "Not Supported"), ("NO_PERMISSION", "Insufficient Permissions")],
)
def test_a_refused_lock_call_fails_cap_and_is_recorded_with_the_drivers_answer(
    node: Path, told: str, message: str
) -> None:
    (node / "state").write_text(STATE + f"lock_clocks_answer={told}\n")
    rc, capped = collector(node, "cap", "2000")
    assert rc == 1 and not capped["ok"]
    assert capped["error"] == (
        f"cannot lock GPU clocks on GPU 0: NVML answered {told} ({message})"
        + (
            "; setting clocks needs root (run tpwarden's clock step as root or via sudo)"
            if told == "NO_PERMISSION"
            else "; this GPU/driver does not support locked clocks"
        )
    )
    assert capped["gpus"][0]["sm_clock_mhz"] == 2411  # the state is untouched
    rc, shown = collector(node, "show")
    assert rc == 0
    reading = read_cap(shown)
    assert reading.state == "refused" and f"NVML answered {told} ({message})" in reading.text
    assert shown["gpus"][0]["locked_clock_max_mhz"] is None
    assert f"answered {told}" in shown["gpus"][0]["missing"]["locked_clock_max_mhz"]


@needs_gcc
def test_show_without_any_record_says_so(node: Path) -> None:
    rc, shown = collector(node, "show")
    assert rc == 0 and shown["clock_cap"]["record"] is None
    assert "no lock call recorded since boot" in shown["clock_cap"]["reason"]
    assert read_cap(shown).state == "none"


# ---- the record and its pure reading -----------------------------------------------------------
def answer(code: int = 0, name: str = "SUCCESS", message: str | None = None) -> LockAnswer:
    return LockAnswer(index=0, answer=name, code=code, message=message)


def doc_with(record: dict[str, Any] | None, sm: int = 1800, reason: str | None = None) -> dict:
    held = record is not None and record["ok"] and record["action"] == "cap"
    gpu = {"index": 0, "sm_clock_mhz": sm, "temp_c": 70}
    gpu["locked_clock_max_mhz"] = record["mhz"] if held else None  # as node/gpu.py fills it
    return {"ok": True, "gpus": [gpu], "clock_cap": {"record": record, "reason": reason}}


def test_read_record_missing_unreadable_and_foreign(tmp_path: Path) -> None:
    assert read_record(tmp_path / "absent") == (
        None,
        "no lock call recorded since boot (clock-cap unit or `tpwarden clocks cap`)",
    )
    bad = tmp_path / "bad.json"
    bad.write_text("{torn")
    record, why = read_record(bad)
    assert record is None and why and "unreadable" in why
    bad.write_text('{"version": 99}')
    assert read_record(bad) == (None, f"clock-cap record {bad} has an unknown format")


def test_make_record_is_ok_only_when_every_gpu_answered_success() -> None:
    two = [answer(), LockAnswer(index=1, answer="NO_PERMISSION", code=4, message="x")]
    assert make_record("cap", 2000, [answer()], T)["ok"]
    assert not make_record("cap", 2000, two, T)["ok"]
    assert not make_record("cap", 2000, [], T)["ok"]  # no GPU answered: nothing proven
    assert make_record("reset", 2000, [answer()], T)["mhz"] is None


def test_recorded_cap_per_gpu() -> None:
    ok = make_record("cap", 2000, [answer()], T)
    assert recorded_cap(ok, None, 0) == (2000, f"set at {WHEN}; NVML has no read-back")
    assert recorded_cap(ok, None, 1)[0] is None  # GPU 1 made no lock call
    refused = make_record("cap", 2000, [answer(3, "NOT_SUPPORTED", "Not Supported")], T)
    assert recorded_cap(refused, None, 0) == (
        None,
        f"NVML has no read-back; lock call at {WHEN} answered NOT_SUPPORTED",
    )
    assert recorded_cap(None, "no lock call", 0) == (None, "NVML has no read-back; no lock call")


def test_read_cap_set_is_the_lock_calls_answer() -> None:
    reading = read_cap(doc_with(make_record("cap", 2000, [answer()], T)))
    assert reading.state == "set" and reading.mhz == 2000 and reading.time_unix_s == T
    assert reading.text == f"2000 MHz set at {WHEN}; NVML has no read-back"
    assert reading.violations == {}


@pytest.mark.parametrize(
    ("name", "code", "message"),
    [("NOT_SUPPORTED", 3, "Not Supported"), ("NO_PERMISSION", 4, "Insufficient Permissions")],
)
def test_read_cap_refused_names_the_drivers_answer(name: str, code: int, message: str) -> None:
    reading = read_cap(doc_with(make_record("cap", 2000, [answer(code, name, message)], T)))
    assert reading.state == "refused" and reading.mhz is None
    assert reading.text == f"lock call at {WHEN} refused: GPU0: NVML answered {name} ({message})"
    assert reading.violations == {}  # no cap in force: nothing to violate


def test_read_cap_without_a_record_and_after_a_reset() -> None:
    none = read_cap(doc_with(None, reason="no lock call recorded since boot"))
    assert none.state == "none"
    assert none.text == "no cap recorded (no lock call recorded since boot); NVML has no read-back"
    assert read_cap({"gpus": []}).state == "none"  # an older collector: no clock_cap at all
    reset = read_cap(doc_with(make_record("reset", None, [answer()], T), sm=2900))
    assert reset.state == "reset" and reset.violations == {}


def test_violation_only_above_cap_plus_tolerance() -> None:
    record = make_record("cap", 2000, [answer()], T)
    edge = 2000 + CLOCK_CAP_TOLERANCE_MHZ
    assert read_cap(doc_with(record, sm=edge)).violations == {}
    over = read_cap(doc_with(record, sm=edge + 1))
    assert over.violations == {
        0: f"GPU0 SM clock {edge + 1} MHz above the 2000 MHz cap (+50 MHz tolerance)"
    }


def test_annotate_gpus_only_adds() -> None:
    doc = doc_with(make_record("cap", 2000, [answer()], T), sm=2300)
    (row,) = annotate_gpus(doc)
    assert {k: row[k] for k in doc["gpus"][0]} == doc["gpus"][0]  # nothing changed or removed
    assert row["clock_cap_state"] == "set" and row["clock_cap_time_unix_s"] == T
    assert row["clock_cap"] == f"2000 MHz set at {WHEN}; NVML has no read-back"
    assert "2300 MHz above the 2000 MHz cap" in row["clock_cap_violation"]


# ---- status: shown, violations noted, the verdict left alone ----------------------------------
def node_status(name: str, doc: dict[str, Any]) -> NodeStatus:
    return NodeStatus(
        node=name, role="worker", reachable=True, state="running", gpus=annotate_gpus(doc)
    )


def test_status_shows_the_cap_and_notes_violations_and_refusals_without_a_verdict_change() -> None:
    ok = make_record("cap", 2000, [answer()], T)
    refused = make_record("cap", 2000, [answer(4, "NO_PERMISSION", "Insufficient Permissions")], T)
    nodes = [
        node_status("node1", doc_with(ok)),
        node_status("node2", doc_with(make_record("cap", 2000, [answer()], T + 5), sm=2400)),
        node_status("node3", doc_with(refused)),
        node_status("node4", doc_with(None, reason="none")),
    ]
    server = ServerStatus("http://h:8000", health_status=200, probe_ok=True)
    verdict, notes = derive_verdict(nodes, server)
    assert verdict is Verdict.HEALTHY
    assert notes == (
        "node2: clock cap violated: GPU0 SM clock 2400 MHz above the 2000 MHz cap "
        "(+50 MHz tolerance)",
        f"node3 GPU0: clock cap lock call at {WHEN} refused: GPU0: NVML answered NO_PERMISSION "
        "(Insufficient Permissions)",
    )
    assert clock_cap_summary(nodes) == (
        f"2000 MHz on node1, node2, set at {WHEN}; lock call refused on node3; "
        "no cap recorded on node4; NVML has no read-back"
    )
    assert clock_cap_summary([]) is None
