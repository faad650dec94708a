"""Rollout scenarios on the lab: a change whose boot crashes rolls back by itself; a rollout
killed after the restart began ends in a defined state on the next call."""

from __future__ import annotations

import difflib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from tpwarden.cluster.control.controller import Controller
from tpwarden.cluster.inventory.load import load_inventory
from tpwarden.lab import faults

from tests.lab.conftest import CLI, tpwarden

pytestmark = pytest.mark.lab


@pytest.fixture
def inv(lab, tmp_path, monkeypatch):
    """A private copy of the lab inventory, the server up on it, rollout state in tmp."""
    path = tmp_path / "inventory.yml"
    shutil.copy(lab.inventory, path)
    monkeypatch.setenv("TPWARDEN_STATE_DIR", str(tmp_path / "state"))
    with Controller(load_inventory(path), state_dir=tmp_path / "state") as ctl:
        assert ctl.up(timeout_s=180).ok
    yield path
    faults.clear_sim_faults(lab.paths)
    with Controller(load_inventory(path), state_dir=tmp_path / "state") as ctl:
        ctl.down()


def _tpwarden(*args, timeout=300):
    return tpwarden(*args, timeout_s=timeout)


def _healthy_hash(path):
    spec = load_inventory(path)
    with Controller(spec) as ctl:
        st = ctl.status()
        ok = ctl.probe()[0]
    hashes = {n.config_hash for n in st.nodes}
    return ok, hashes


def test_boot_crash_rolls_back_to_the_old_revision(lab, inv, tmp_path):
    old_hash = load_inventory(inv).config_hash()
    before = inv.read_text()
    faults.sim_fault(
        lab.paths, "boot_crash_at", phase="load_weights", when_argv=['"num_speculative_tokens":5']
    )
    result = _tpwarden(
        "rollout", "-i", str(inv), "--set", "drafter.num_speculative_tokens=5", "--yes"
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "rolled_back" in result.stdout
    assert inv.read_text() == before
    ok, hashes = _healthy_hash(inv)
    assert ok and hashes == {old_hash}
    done = _tpwarden("rollout", "history", "-i", str(inv), "--json")
    history = json.loads(done.stdout)["rollouts"]  # under the one envelope (issue 51 item 6)
    assert len(history) == 1 and history[0]["step"] == "rolled_back"
    # the boot's own verdict, not a timeout (issue 30 item 5)
    assert "new config failed at boot after" in history[0]["reason"], history[0]["reason"]


def test_killed_mid_restart_then_resume_ends_on_the_new_config(lab, inv, tmp_path):
    state = tmp_path / "state" / "rollout" / lab.paths.cluster_name / "current.json"
    proc = subprocess.Popen(
        [
            *CLI,
            "rollout",
            "-i",
            str(inv),
            "--set",
            "drafter.num_speculative_tokens=4",
            "--yes",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if state.exists() and json.loads(state.read_text())["step"] == "restarting":
            break
        time.sleep(0.1)
    else:
        proc.kill()
        pytest.fail("rollout never reached the restart")
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    again = _tpwarden(
        "rollout", "-i", str(inv), "--set", "drafter.num_speculative_tokens=6", "--yes"
    )
    assert again.returncode == 2 and "interrupted" in again.stderr  # refuses, says what to do
    resumed = _tpwarden("rollout", "-i", str(inv), "--resume")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert json.loads(state.read_text())["step"] == "done"
    ok, hashes = _healthy_hash(inv)
    assert ok and hashes == {load_inventory(inv).config_hash()}
    assert "num_speculative_tokens: 4" in Path(inv).read_text()


@pytest.mark.timeout(900)
def test_k7_to_k3_measured_before_and_after(lab, tmp_path, monkeypatch):
    """The report's rollout: k=7 -> k=3 measured with the real `vllm bench serve` client.
    Single stream goes down, 32-stream aggregate goes up; healthy on the new config hash;
    the inventory diff is exactly the changed value."""
    path = tmp_path / "inventory.yml"
    text = Path(lab.inventory).read_text()
    # Steps at 0.15 of the field's, not the lab's 0.05: at 0.05 a 32-stream step is 18-24 ms and
    # the simulator's own per-token work, not its model, set the aggregate (1600 tok/s against
    # the model's 3200-3800), so beside the engine lane k=3 measured 3 % below k=7 (CI5). At
    # 0.15 the model's time dominates, as the GPU's does in the field.
    assert "VLLM_SIM_STEP_SCALE: '0.05'" in text
    text = text.replace("VLLM_SIM_STEP_SCALE: '0.05'", "VLLM_SIM_STEP_SCALE: '0.15'")
    path.write_text(text.replace("num_speculative_tokens: 3", "num_speculative_tokens: 7"))
    before = path.read_text()
    monkeypatch.setenv("TPWARDEN_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("TPWARDEN_RUNS_DIR", str(tmp_path / "runs"))
    with Controller(load_inventory(path), state_dir=tmp_path / "state") as ctl:
        assert ctl.up(timeout_s=180, replace=True).ok
    try:
        result = _tpwarden(
            "rollout", "-i", str(path), "--set", "drafter.num_speculative_tokens=3",
            "--bench", "quick", "--guard", "c=32 aggregate >= -5%", "--yes", timeout=800,
        )  # fmt: skip
        assert result.returncode == 0, result.stdout + result.stderr
        changed = [
            line
            for line in difflib.unified_diff(
                before.splitlines(), path.read_text().splitlines(), lineterm=""
            )
            if line[:1] in "+-" and line[:3] not in ("---", "+++")
        ]
        assert changed == [
            "-        num_speculative_tokens: 7",
            "+        num_speculative_tokens: 3",
        ]
        record = json.loads(
            (tmp_path / "state" / "rollout" / lab.paths.cluster_name / "current.json").read_text()
        )
        b, a = record["baseline"]["rows"], record["after"]["rows"]
        assert a["1"]["per_stream"] < b["1"]["per_stream"], (b, a)  # one user loses
        assert a["32"]["aggregate"] > b["32"]["aggregate"], (b, a)  # many users gain
        ok, hashes = _healthy_hash(path)
        assert ok and hashes == {load_inventory(path).config_hash()} and record["step"] == "done"
    finally:
        with Controller(load_inventory(path), state_dir=tmp_path / "state") as ctl:
            ctl.down()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def watched(inv, tmp_path):
    """A watchdog (the real daemon, a subprocess) armed on the private inventory copy."""
    wd = tmp_path / "wd"
    doc = yaml.safe_load(inv.read_text())
    # its own state dir and a free /metrics port: never the port a demo, the lab's Prometheus
    # target (9410) or a real watchdog uses
    doc["all"]["vars"]["tpwarden"]["watchdog"].update(state_dir=str(wd), metrics_port=free_port())
    text = yaml.safe_dump(doc, sort_keys=False)
    inv.write_text(text)
    wd.mkdir()
    log = open(tmp_path / "watchdog.log", "w")  # noqa: SIM115
    proc = subprocess.Popen(
        [*CLI, "watchdog", "run", "-i", str(inv)],
        stdout=log,
        stderr=log,
        start_new_session=True,
    )
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        state = wd / "state.json"
        if state.exists() and json.loads(state.read_text())["policy"]["phase"] == "ready":
            break
        time.sleep(0.5)
    else:
        os.killpg(proc.pid, signal.SIGTERM)
        pytest.fail(
            "the watchdog never became ready: " + (tmp_path / "watchdog.log").read_text()[-2000:]
        )
    yield wd
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(timeout=30)
    log.close()


def _wd_events(wd):
    return [
        json.loads(line) for line in (wd / "events.jsonl").read_text().splitlines() if line.strip()
    ]


def test_direct_rollout_holds_the_watchdog_and_releases_it(lab, inv, watched):
    result = _tpwarden(
        "rollout", "-i", str(inv), "--set", "drafter.num_speculative_tokens=4", "--yes"
    )
    assert result.returncode == 0, result.stdout + result.stderr
    kinds = [e["kind"] for e in _wd_events(watched)]
    assert "restart_begin" not in kinds  # the watchdog saw the restart and left it alone
    hold = json.loads((watched / "hold.json").read_text())
    assert hold["hold"] is None and hold["released_at"]  # held during, released after
    ok, hashes = _healthy_hash(inv)
    assert ok and hashes == {load_inventory(inv).config_hash()}


def test_rollout_via_watchdog(lab, inv, watched):
    result = _tpwarden(
        "rollout",
        "-i",
        str(inv),
        "--set",
        "drafter.num_speculative_tokens=5",
        "--via",
        "watchdog",
        "--yes",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    ends = [e for e in _wd_events(watched) if e["kind"] == "restart_end"]
    assert len(ends) == 1 and ends[0]["ok"]  # the watchdog restarted it, once
    ok, hashes = _healthy_hash(inv)
    assert ok and hashes == {load_inventory(inv).config_hash()}
    assert "num_speculative_tokens: 5" in inv.read_text()
