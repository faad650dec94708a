"""The guard as a process, `experiment show`, `experiment abort` and a night stopped by SIGTERM
(issue 54, item 2 and `show|abort`): the guard is started detached (its own session, stdin
from /dev/null, its log beside the results) unless one is alive; the real `experiment guard`
outlives a kill -9 of its night's process group and ends by itself once the night finishes;
SIGTERM stops a night at once, recorded, nothing restored by it; `abort` stops a live night
(SIGTERM, then SIGKILL) or finds none, restores production under the locks and closes the
night so `--resume` refuses it; `show` gives each variant's figures beside production's, a
failure's root cause and the events. The cluster's ports are faked; the locks are real (a
private inventory: the cluster lock in this test's directory)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import SimpleNamespace

import pytest
from tpwarden.cluster.cli import app
from tpwarden.cluster.experiment.guard import (
    GuardRecord,
    GuardState,
    night_rollouts,
    read_guard,
    write_guard,
)
from tpwarden.cluster.experiment.night import NightFiles, RunRecord
from tpwarden.cluster.inventory.load import load_inventory
from tpwarden.cluster.operations import experiment_abort, experiment_run
from tpwarden.cluster.operations.experiment import results_dir
from tpwarden.cluster.operations.experiment_arm import _watching, arm_guard, live_guard, pid_of
from tpwarden.cluster.operations.experiment_run import ClusterNight as RealClusterNight
from tpwarden.cluster.operations.rollout import rollout_lock_path, rollout_store
from tpwarden.cluster.operator_lock import ClusterBusy, FileLock, one_actor
from tpwarden.cluster.rollout.edit import Change, parse_set
from tpwarden.cluster.rollout.layout import plan_edit
from typer.testing import CliRunner

from .test_experiment_night import GOOD, K5, FakeArm, FakeClusterNight, Killed, _plan

runner = CliRunner()


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, Path]:
    """(inventory, plan, results dir): good.yml with its watchdog's state (and so the cluster
    lock) in tmp, the state dir in tmp, the night's ports faked, its guard not started."""
    monkeypatch.setenv("TPWARDEN_STATE_DIR", str(tmp_path / "state"))
    text = GOOD.read_text().replace(
        "      watchdog:\n", f"      watchdog:\n        state_dir: {tmp_path / 'watchdog'}\n", 1
    )
    inv = tmp_path / "inv.yml"
    inv.write_text(text)
    plan = _plan(tmp_path, K5 + "  - name: no-drafter\n    set: [drafter=null]\n")
    FakeClusterNight.running, FakeClusterNight.calls, FakeClusterNight.kill_at = {}, [], None
    FakeArm.armed = []
    for module in (experiment_run, experiment_abort):
        monkeypatch.setattr(module, "ClusterNight", FakeClusterNight)
    monkeypatch.setattr(experiment_run, "arm_guard", FakeArm())
    FakeClusterNight.running["hash"] = load_inventory(inv).config_hash()
    return inv, plan, results_dir(load_inventory(inv).name, plan)


def _cli(*args: str):
    return runner.invoke(app, ["experiment", *args], terminal_width=200)


def _kinds(root: Path) -> list[str]:
    return [str(e["kind"]) for e in NightFiles(root).events()]


def _killed_on_no_drafter(inv: Path, plan: Path) -> None:
    FakeClusterNight.kill_at = "no-drafter"
    with pytest.raises(Killed):
        experiment_run.run_experiment(plan, inv)
    FakeClusterNight.kill_at = None
    FakeClusterNight.calls = []


# -- arming -------------------------------------------------------------------------------------
class Spawned:
    def __init__(self) -> None:
        self.calls: list[tuple[list[str], dict[str, object]]] = []
        self.pid = 31337

    def __call__(self, args: list[str], **kw: object) -> Spawned:
        self.calls.append((args, kw))
        return self


def test_the_guard_is_started_detached_unless_one_is_alive(env, tmp_path: Path) -> None:
    inv, plan, root = env
    files = NightFiles(root)
    files.write_run(RunRecord(str(plan), str(inv), "tpwarden", "rev0", "h", 1.0, 2.0))
    spawn = Spawned()
    armed = arm_guard(plan, inv, files, spawn)  # type: ignore[arg-type]
    assert armed.started and armed.pid == 31337
    (args, kw), = spawn.calls  # fmt: skip
    assert args[0] == sys.executable and args[1:5] == ["-m", "tpwarden.cluster.cli",
                                                        "experiment", "guard"]  # fmt: skip
    assert args[5] == str(plan.resolve()) and args[6:] == ["-i", str(inv.resolve())]
    assert kw["start_new_session"] is True and kw["close_fds"] is True
    assert kw["stdin"] == subprocess.DEVNULL and kw["stderr"] == subprocess.STDOUT
    assert (root / "guard.log").exists() and _kinds(root)[-1] == "guard_started"

    with FileLock(str(root / "guard.lock")).holding("tpwarden experiment guard night.yml"):
        again = arm_guard(plan, inv, files, spawn)  # type: ignore[arg-type]
    assert not again.started and again.pid == os.getpid() and len(spawn.calls) == 1
    assert _kinds(root)[-1] == "guard_alive"
    files.close()


def test_a_guard_that_has_acted_and_is_exiting_does_not_keep_a_resume_from_its_own(
    tmp_path: Path,
) -> None:
    lock = FileLock(str(tmp_path / "guard.lock"))
    lock.acquire("tpwarden experiment guard night.yml")
    write_guard(tmp_path, GuardRecord(7, 1.0, 2.0, 3.0, 1.0, "x", GuardState.ARMED))
    assert _watching(tmp_path, grace_s=5.0) is not None  # armed: it watches; at once
    write_guard(tmp_path, GuardRecord(7, 1.0, 2.0, 3.0, 1.0, "x", GuardState.RESTORED))
    assert _watching(tmp_path, grace_s=0.3) is not None  # still holding it past the grace
    threading.Timer(0.3, lock.release).start()
    assert _watching(tmp_path, grace_s=10.0) is None  # it exits: a new guard may start


def test_the_night_arms_its_guard_once_its_run_record_is_written(env) -> None:
    inv, plan, root = env
    out = experiment_run.run_experiment(plan, inv)
    assert out.ok and FakeArm.armed == [root] and out.guard is not None
    status = _cli("status", str(plan), "-i", str(inv))
    assert status.exit_code == 0 and "guard: none armed" in status.stdout  # the fake wrote none


class FakeOperation:
    """`RolloutOperation` as the night's restart uses it: the order of its calls."""

    order: list[str] = []

    def __init__(self, *args: object, **kwargs: object) -> None:
        pass

    def __enter__(self) -> FakeOperation:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def prepare(self, changes: object, guards: object) -> SimpleNamespace:
        self.order.append("prepare")
        return SimpleNamespace(id="20260101-010203")

    def run(self, record: SimpleNamespace, guards: object) -> SimpleNamespace:
        self.order.append("run")
        return SimpleNamespace(step="done", id=record.id, new_hash="h-k5", reason=None)


def test_each_variant_s_rollout_is_named_in_the_events_before_it_runs(
    env, monkeypatch: pytest.MonkeyPatch
) -> None:
    inv, plan, root = env
    monkeypatch.setattr(experiment_run, "ClusterNight", RealClusterNight)
    monkeypatch.setattr(experiment_run, "RolloutOperation", FakeOperation)
    k5 = [parse_set("drafter.num_speculative_tokens=5")]
    rev = rollout_store(inv).save_revision(plan_edit(str(inv), k5).old)
    files = NightFiles(root)
    run = RunRecord(str(plan), str(inv), "tpwarden", rev, "h", 1.0, 2.0)
    ports = experiment_run._ports(inv, run, files, lambda line: None, None)

    def named(variant: str, rollout_id: str) -> None:
        FakeOperation.order.append(f"named {rollout_id}")
        files.event("variant_rollout", variant=variant, rollout_id=rollout_id)

    assert ports.on_rollout is not None
    ports.on_rollout, FakeOperation.order = named, []
    got = ports.restart_on("k5", k5)
    assert got.ok and FakeOperation.order == ["prepare", "named 20260101-010203", "run"]
    assert night_rollouts(files.events()) == {"20260101-010203"}
    files.close()


# -- the real process ----------------------------------------------------------------------------
PARENT = """
import subprocess, sys, time
from pathlib import Path
from tpwarden.cluster.experiment.night import NightFiles
from tpwarden.cluster.operations.experiment_arm import arm_guard

def spawn(args, **kw):  # the night's own arming, looking every 0.3 s
    return subprocess.Popen([*args, "--poll-s", "0.3"], **kw)

files = NightFiles(Path({root!r}))
armed = arm_guard(Path({plan!r}), Path({inv!r}), files, spawn)
files.close()
print(armed.pid, flush=True)
time.sleep(900)
"""


def _until(what: Callable[[], object], within_s: float, why: str) -> None:
    end = time.monotonic() + within_s
    while not what():
        assert time.monotonic() < end, why
        time.sleep(0.2)


def _ours(pid: int) -> bool:
    try:
        return b"experiment\x00guard" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


@pytest.mark.timeout(600)
def test_the_real_guard_outlives_a_kill_9_of_its_night_and_ends_when_the_night_finishes(
    env,
) -> None:
    inv, plan, root = env
    files = NightFiles(root)
    now = time.time()
    run = RunRecord(str(plan), str(inv), "tpwarden", "rev0", "h", now, now + 6 * 3600)
    files.write_run(run)
    code = PARENT.format(root=str(root), plan=str(plan), inv=str(inv))
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                              start_new_session=True)  # fmt: skip
    guard_pid = 0
    try:
        guard_pid = int(parent.stdout.readline())  # type: ignore[union-attr]
        _until(lambda: pid_of(live_guard(root)) == guard_pid, 300, "the guard never armed")
        _until(
            lambda: (rec := read_guard(root)) is not None and rec.pid == guard_pid, 60, "no record"
        )
        assert os.getsid(guard_pid) == guard_pid != os.getsid(parent.pid)  # a session of its own
        os.killpg(parent.pid, signal.SIGKILL)  # the night and its whole process group, -9
        assert parent.wait(timeout=30) == -signal.SIGKILL
        time.sleep(1.0)
        assert pid_of(live_guard(root)) == guard_pid and _ours(guard_pid)  # it lives on
        run.finished = time.time()
        files.write_run(run)
        _until(lambda: live_guard(root) is None, 120, "the guard did not end by itself")
        rec = read_guard(root)
        assert rec is not None and rec.state is GuardState.ENDED and "finished" in rec.detail
        log = (root / "guard.log").read_text()
        assert "guard: armed" in log and "guard ended: the night finished" in log
        assert _kinds(root) == ["guard_started", "guard_armed"]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(parent.pid, signal.SIGKILL)
        parent.wait(timeout=30)
        if guard_pid and _ours(guard_pid):
            os.kill(guard_pid, signal.SIGKILL)
        files.close()


# -- SIGTERM: the night stops at once, restoring nothing itself -----------------------------------
class SigtermNight(FakeClusterNight):
    """Told to stop (as `experiment abort` does) during the second variant's restart."""

    stop_at: str | None = None

    def restart_on(self, name: str, changes: Sequence[Change]):
        got = super().restart_on(name, changes)
        if name == self.stop_at:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler raises before this ends
            raise AssertionError("SIGTERM did not stop the night")
        return got


def test_sigterm_stops_the_night_at_once_and_resume_then_restores_first(
    env, monkeypatch: pytest.MonkeyPatch
) -> None:
    inv, plan, root = env
    monkeypatch.setattr(experiment_run, "ClusterNight", SigtermNight)
    SigtermNight.stop_at = "no-drafter"
    before = signal.getsignal(signal.SIGTERM)
    res = _cli("run", str(plan), "-i", str(inv), "--json")
    assert res.exit_code == 1, res.output
    doc = json.loads(res.stdout)
    assert doc["ok"] is False and "stopped by SIGTERM" in doc["error"]["message"]
    assert signal.getsignal(signal.SIGTERM) == before  # the handler is the night's only
    assert "restore" not in FakeClusterNight.calls  # it restores nothing itself
    assert _kinds(root)[-1] == "run_stopped"
    run = NightFiles(root).read_run()
    assert run is not None and run.finished is None
    SigtermNight.stop_at, FakeClusterNight.calls = None, []
    again = experiment_run.run_experiment(plan, inv, resume=True)
    assert FakeClusterNight.calls[:2] == ["restore", "restart no-drafter"] and again.ok


# -- abort --------------------------------------------------------------------------------------
def test_abort_with_no_night_process_restores_production_and_closes_the_night(env) -> None:
    inv, plan, root = env
    assert _cli("abort", str(plan), "-i", str(inv)).exit_code == 2  # no night yet
    _killed_on_no_drafter(inv, plan)
    res = _cli("abort", str(plan), "-i", str(inv), "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["aborted"] and doc["night_pid"] is None and doc["restored"]["restarted"]
    assert FakeClusterNight.calls == ["restore"]
    run = NightFiles(root).read_run()
    assert run is not None and run.finished is not None and run.aborted_at is not None
    assert _kinds(root)[-4:] == ["aborted", "restore_begin", "restore_end", "abort_end"]
    resumed = _cli("run", str(plan), "-i", str(inv), "--resume")
    assert resumed.exit_code == 2 and "was aborted by" in resumed.output
    again = _cli("abort", str(plan), "-i", str(inv))
    assert again.exit_code == 0 and "nothing to abort" in again.stdout
    status = _cli("status", str(plan), "-i", str(inv))
    assert "aborted" in status.stdout


@pytest.mark.parametrize("obeys", ["SIGTERM", "SIGKILL"])
def test_abort_stops_a_live_night_by_its_lock_s_pid_then_restores(env, obeys: str) -> None:
    inv, plan, root = env
    _killed_on_no_drafter(inv, plan)
    sent: list[tuple[int, int]] = []
    with contextlib.ExitStack() as night:
        night.enter_context(one_actor(rollout_lock_path(inv),
                                      f"tpwarden experiment run {plan.name} by ops@control"))  # fmt: skip

        def kill(pid: int, sig: int) -> None:
            sent.append((pid, sig))
            if signal.Signals(sig).name == obeys:
                night.close()  # the night unwinds: its lock goes

        out = experiment_abort.abort_night(plan, inv, stop_s=1.0, kill=kill, sleep=lambda s: None)
    assert out.ok and out.night_pid == os.getpid() and out.signal == obeys
    want = [signal.SIGTERM] if obeys == "SIGTERM" else [signal.SIGTERM, signal.SIGKILL]
    assert [s for _, s in sent] == want and {p for p, _ in sent} == {os.getpid()}
    assert FakeClusterNight.calls == ["restore"]
    events = NightFiles(root).events()
    aborted = [e for e in events if e["kind"] == "aborted"][0]
    assert aborted["night_pid"] == os.getpid() and aborted["signal"] == obeys


def test_abort_beside_anything_but_its_night_is_refused_naming_it(env) -> None:
    inv, plan, root = env
    _killed_on_no_drafter(inv, plan)
    with one_actor(rollout_lock_path(inv), "tpwarden rollout by ops@control"):
        res = _cli("abort", str(plan), "-i", str(inv), "--json")
        with pytest.raises(ClusterBusy):
            experiment_abort.abort_night(plan, inv, kill=lambda p, s: pytest.fail("killed"))
    assert res.exit_code == 2 and "tpwarden rollout by ops@control" in res.stdout
    run = NightFiles(root).read_run()
    assert run is not None and run.aborted_at is None and FakeClusterNight.calls == []


# -- show and status ----------------------------------------------------------------------------
def _level(tok_s: float, ttft: float, accept: float | None) -> dict:
    return {"level": 1, "output_tok_s": tok_s, "per_stream_tok_s": tok_s, "ttft_p50_ms": ttft,
            "itl_p50_ms": 80.0, "acceptance_pct": accept, "tokens_per_step": None}  # fmt: skip


@pytest.fixture
def shown(env) -> Iterator[tuple[Path, Path, Path]]:
    """A night's results as the queue writes them: production 12.0 tok/s, k5 13.2, the drafter
    off failed at boot; the guard fired and restored production."""
    inv, plan, root = env
    files = NightFiles(root, clock=lambda: 1_767_000_000.0)
    files.write_run(RunRecord(str(plan), str(inv), "tpwarden", "rev0", "prod", 1.767e9, 1.768e9))
    files.write_result("production-start", {"canary": {"levels": [_level(12.0, 300.0, 60.0)]}})
    files.write_result("k5", {"variant": "k5", "summary": ["drafter: k 3 -> 5"],
                              "config_hash": "h-k5", "rollout_id": "r-k5", "rollout_step": "done",
                              "started": 1.767e9, "finished": 1.767e9 + 1320,
                              "canary": {"levels": [_level(13.2, 270.0, 55.0)]}})  # fmt: skip
    files.write_failure("no-drafter", {"variant": "no-drafter", "stage": "restart",
                                       "rollout_id": "r-nd", "rollout_step": "rolled_back",
                                       "error": "new config failed at boot after 12.7 s: CUDA "
                                       "out of memory"})  # fmt: skip
    for kind, variant in (("run_begin", None), ("variant_begin", "k5"), ("variant_end", "k5"),
                          ("variant_begin", "no-drafter"), ("variant_failed", "no-drafter"),
                          ("guard_restored", None)):  # fmt: skip
        files.event(kind, **({"variant": variant} if variant else {}))
    write_guard(root, GuardRecord(4242, 1.767e9, 1.7679e9, 1.768e9, 1830.0, "boot 18.5 min",
                                  GuardState.RESTORED, "every node runs prod", 1.7679e9))  # fmt: skip
    files.close()
    yield inv, plan, root


def test_show_gives_each_variant_beside_production_the_root_cause_and_the_events(shown) -> None:
    inv, plan, root = shown
    res = _cli("show", str(plan), "-i", str(inv), "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    k5, nd = doc["variants"]
    figures = k5["compared"][0]["figures"]
    assert figures["output_tok_s"] == {"value": 13.2, "production": 12.0, "ratio": 1.1}
    assert figures["ttft_p50_ms"]["ratio"] == 0.9 and figures["tokens_per_step"]["ratio"] is None
    assert nd["status"] == "failed" and "CUDA out of memory" in nd["error"]
    assert [e["kind"] for e in doc["events"]][-1] == "guard_restored" and len(doc["events"]) == 6
    assert doc["guard"]["state"] == "restored" and doc["guard"]["alive"] is False
    text = _cli("show", str(plan), "-i", str(inv)).stdout
    assert "13.2 / 12.0 x1.100" in text and "failed at restart: new config failed" in text
    assert "guard: fired" in text and "restored production" in text
    one = json.loads(_cli("show", str(plan), "k5", "-i", str(inv), "--json").stdout)
    assert [v["name"] for v in one["variants"]] == ["k5"] and len(one["events"]) == 2
    bad = _cli("show", str(plan), "nope", "-i", str(inv))
    assert bad.exit_code == 2 and "k5, no-drafter" in bad.output


def test_status_shows_a_live_guard_armed_with_its_fire_time(shown) -> None:
    inv, plan, root = shown
    write_guard(root, GuardRecord(os.getpid(), 1.767e9, 1.7679e9, 1.768e9, 1830.0, "boot 18.5 min"))
    with FileLock(str(root / "guard.lock")).holding("tpwarden experiment guard night.yml"):
        doc = json.loads(_cli("status", str(plan), "-i", str(inv), "--json").stdout)
        text = _cli("status", str(plan), "-i", str(inv)).stdout
    assert doc["guard"]["alive"] is True and doc["guard"]["state"] == "armed"
    assert f"guard: armed (pid {os.getpid()}), fires" in text and "boot 18.5 min" in text
