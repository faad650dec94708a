"""The night's deadline guard on the lab (simulator), issue 54's done-when: the night's process and
its process group killed with -9 during the second variant; the guard, a process of its own armed
at the start, restores production by its revision before the deadline and says so in the night's
events; `--resume` with a later deadline then runs only the second variant. On lab lane 2
(scripts/test.sh): it mostly waits for the guard's time, beside the engine lane's CPU work."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from tpwarden.cluster.control.controller import Controller
from tpwarden.cluster.spec import ClusterSpec

from tests.lab.conftest import CLI, tpwarden
from tests.lab.test_experiment import VARIANTS, _read, _up

pytestmark = pytest.mark.lab


FIRED = ("guard_restored", "guard_verified", "guard_restore_failed")


def _guarded_plan(plan: Path, inv: Path) -> float:
    """The plan with a deadline just long enough (in whole minutes, no margin): the night's
    whole estimate (boot b, canary c, from the lab's own records: c + 2 (b + c) + (b + c)) and
    90 s, and at least the time to its second variant (about 2c + b and the night's own
    overhead) plus the guard's restore estimate (b + 2 min) and a minute, so the guard's time
    comes just after the kill there. Returns the night's length in seconds."""
    plan.write_text('restore_by: "+02:00"\nmargin_min: 0\n' + VARIANTS)
    est = tpwarden("experiment", "run", str(plan), "-i", str(inv), "--dry-run", "--json")
    assert est.returncode == 0, est.stdout[-2000:] + est.stderr[-2000:]
    queue = json.loads(est.stdout)["queue"]
    b, c = queue["costs"]["boot_s"], queue["costs"]["canary_s"]
    minutes = math.ceil(max(queue["whole_s"] + 90, 2 * c + 2 * b + 180) / 60)
    assert minutes < 60, queue
    plan.write_text(f'restore_by: "+00:{minutes:02d}"\nmargin_min: 0\n' + VARIANTS)
    return minutes * 60.0


def _events(results: Path) -> list[dict]:
    path = results / "events.jsonl"
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def _until(what: Callable[[], object], within_s: float, why: Callable[[], str]) -> object:
    end = time.monotonic() + within_s
    while not (got := what()):
        assert time.monotonic() < end, why()
        time.sleep(1.0)
    return got


def _on_production(spec: ClusterSpec, production: str) -> None:
    with Controller(spec) as ctl:
        assert {n.config_hash for n in ctl.status(with_gpus=False).nodes} == {production}
        assert ctl.probe()[0]


def _ours(pid: int) -> bool:
    try:
        return b"experiment\x00guard" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


@pytest.mark.timeout(1800, func_only=True)  # an up, 6 canaries, 5 restarts, the guard's wait
def test_a_night_killed_on_its_second_variant_is_restored_by_its_guard_then_resumed(
    night_inv: Path, tmp_path: Path
) -> None:
    inv = night_inv
    t0 = time.monotonic()
    spec, production, before = _up(inv)
    # one canary first: the night's estimate takes its time from the ledger (else 5 min assumed)
    canary = tpwarden("ledger", "canary", "-i", str(inv), "--json", timeout_s=300)
    assert canary.returncode == 0, canary.stdout[-2000:] + canary.stderr[-2000:]
    plan = tmp_path / "guarded.yml"
    length_s = _guarded_plan(plan, inv)
    results = tmp_path / "state" / "experiment" / spec.name / "guarded"
    out = tmp_path / "night.out"
    with out.open("w") as sink:
        night = subprocess.Popen([*CLI, "experiment", "run", str(plan), "-i", str(inv)],
                                 stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    guard_pid = 0
    try:
        # during the second variant: its rollout named, its restart under way
        _until(lambda: any(e["kind"] == "variant_rollout" and e.get("variant") == "no-drafter"
                           for e in _events(results)), 600,
               lambda: "the night never reached its second variant: " + out.read_text()[-3000:])  # fmt: skip
        guard_pid = _read(results / "guard.json")["pid"]  # armed at the night's start
        time.sleep(3.0)
        assert night.poll() is None, out.read_text()[-3000:]
        os.killpg(night.pid, signal.SIGKILL)  # the night and its whole process group, -9
        assert night.wait(timeout=30) == -signal.SIGKILL
        killed = time.time()
        run = _read(results / "run.json")
        assert run["finished"] is None and killed < run["deadline"]
        assert _ours(guard_pid), "the guard died with the night"

        # the guard restores production by its time, before the deadline, and says so
        fired = _until(lambda: [e for e in _events(results) if e["kind"] in FIRED],
                       run["deadline"] - time.time() + 300,
                       lambda: "the guard never acted: " + (results / "guard.log").read_text())  # fmt: skip
        assert isinstance(fired, list) and fired[0]["kind"] == "guard_restored", fired
        assert fired[0]["before_deadline"] and fired[0]["at"] <= run["deadline"], fired
        assert inv.read_bytes() == before
        _on_production(spec, production)
        guard = _read(results / "guard.json")
        assert guard["state"] == "restored" and guard["pid"] == guard_pid
        _until(lambda: not _ours(guard_pid), 60, lambda: "the guard did not exit once it acted")
        assert _read(results / "run.json")["finished"] is None  # --resume runs what is left
        kinds = [e["kind"] for e in _events(results)]
        assert kinds.index("guard_started") < kinds.index("run_begin") and "guard_armed" in kinds
        assert kinds[-4:] == ["guard_fired", "restore_begin", "restore_end", "guard_restored"]
        status = json.loads(tpwarden("experiment", "status", str(plan), "-i", str(inv),
                                     "--json").stdout)  # fmt: skip
        assert [v["status"] for v in status["variants"]] == ["done", "left"]
        assert status["guard"]["state"] == "restored" and status["lock_holder"] is None
        print(
            f"killed {killed - run['started']:.0f} s into a {length_s:.0f} s night; the guard restored "
            f"production {fired[0]['at'] - killed:.0f} s later, "
            f"{run['deadline'] - fired[0]['at']:.0f} s before the deadline"
        )

        # --resume, with a later deadline (the night's own has no room left): only no-drafter
        again = tpwarden("experiment", "run", str(plan), "-i", str(inv), "--resume",
                         "--restore-by", "+00:10", "--json", timeout_s=900)  # fmt: skip
        assert again.stdout.strip(), again.stderr[-3000:]
        doc = json.loads(again.stdout)
        assert again.returncode == 0 and doc["ok"], (doc, again.stderr[-3000:])
        assert doc["done"] == ["no-drafter"] and not doc["failed"] and not doc["skipped"]
        assert doc["restored"]["ok"] and doc["guard"]["started"]
        kinds = [e["kind"] for e in _events(results)]
        begun = [e["variant"] for e in _events(results) if e["kind"] == "variant_begin"]
        assert begun == ["k5", "no-drafter", "no-drafter"]  # k5 not repeated
        resumed = kinds[kinds.index("deadline_moved") :]
        assert resumed.index("variant_begin") < resumed.index("restore_begin")  # no restore first
        assert inv.read_bytes() == before
        _on_production(spec, production)
        _until(lambda: _read(results / "guard.json")["state"] == "ended", 120,
               lambda: "the resumed night's guard did not end: " + str(_read(results / "guard.json")))  # fmt: skip
        print(tpwarden("experiment", "show", str(plan), "-i", str(inv)).stdout)
        print(f"the guarded night on the lab took {time.monotonic() - t0:.0f} s (up included)")
    finally:
        if night.poll() is None:
            os.killpg(night.pid, signal.SIGKILL)
            night.wait(timeout=30)
        _stop_guards(results, guard_pid)


def _stop_guards(results: Path, *pids: int) -> None:
    """A guard this test's nights started, still waiting after a failure: not left behind."""
    recorded = results / "guard.json"
    if recorded.exists():
        pids = (*pids, int(_read(recorded).get("pid") or 0))
    for pid in set(pids) - {0}:
        if _ours(pid):
            os.kill(pid, signal.SIGKILL)
