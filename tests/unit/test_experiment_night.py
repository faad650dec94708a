"""The unattended night (issue 54, second step) with fake ports: the queue's order, a variant
skipped when the real time no longer holds it, a failed variant recorded and the night going on,
production restored and measured at the end; a night killed between any two steps and resumed
repeats nothing and restores production first; the CLI refuses a second night, a night without
--resume over an unfinished one, and what this step cannot measure."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from pathlib import Path

import pytest
from tpwarden.cluster.cli import app
from tpwarden.cluster.errors import ConfigError
from tpwarden.cluster.experiment.night import NightFiles, RunRecord, drift, left_on
from tpwarden.cluster.experiment.policy import Costs
from tpwarden.cluster.experiment.queue import (
    Measured,
    NightQueue,
    NotOnProduction,
    QueuedVariant,
    Restored,
    VariantRestart,
)
from tpwarden.cluster.experiment.resume import failure_name, result_name
from tpwarden.cluster.inventory.load import load_inventory
from tpwarden.cluster.operations import experiment_run
from tpwarden.cluster.operations.experiment_arm import GuardArming
from tpwarden.cluster.operations.experiment_run import ClusterNight
from tpwarden.cluster.operations.rollout import RolloutOperation, rollout_lock_path
from tpwarden.cluster.operator_lock import ClusterBusy, one_actor
from tpwarden.cluster.rollout.edit import Change, parse_set
from tpwarden.cluster.rollout.layout import plan_edit, spec_with, write_files
from typer.testing import CliRunner

GOOD = Path(__file__).parent / "inventories" / "good.yml"
T0 = 1_767_000_000.0
BOOT_S, CANARY_S = 600.0, 120.0
COSTS = Costs(BOOT_S, "test", CANARY_S, "test", margin_s=300.0)
PROD = "prod-hash"
TOK_S = {"production-start": 12.0, "k5": 13.2, "no-drafter": 9.0, "k7": 12.6,
         "production-end": 11.4}  # fmt: skip


class Killed(BaseException):
    """The control process killed (as by -9): nothing after it runs."""


class FakeNight:
    """The ports: a cluster that runs one config hash, a rollout store that says which, a clock
    each step advances by its cost; `kill_after` kills the night right after that many steps."""

    def __init__(self, *, fails: Sequence[str] = (), kill_after: int | None = None) -> None:
        self.now = T0
        self.running = PROD  # what every node runs
        self.store = PROD  # what the rollout store says this night left the cluster on
        self.fails = set(fails)
        self.kill_after = kill_after
        self.calls: list[str] = []
        self.verified = 0

    def _step(self, what: str) -> None:
        self.calls.append(what)
        if self.kill_after is not None and len(self.calls) >= self.kill_after:
            raise Killed(what)

    def clock(self) -> float:
        return self.now

    def left_on(self) -> str | None:
        return self.store

    def verify(self) -> tuple[bool, str]:  # waits up to 2 minutes for a cluster that is not
        self.verified += 1
        return self.running == PROD, f"every node runs {self.running}"

    def restart_on(self, name: str, changes: Sequence[Change]) -> VariantRestart:
        self.now += BOOT_S
        if name in self.fails:  # the rollout rolled back to production by itself
            self.running = self.store = PROD
            self.now += BOOT_S
            result = VariantRestart(False, "rolled_back", f"r-{name}", f"h-{name}",
                                    "new config failed at boot after 12.7 s: CUDA out of memory")  # fmt: skip
        else:
            self.running = self.store = f"h-{name}"
            result = VariantRestart(True, "done", f"r-{name}", f"h-{name}")
        self._step(f"restart {name}")
        return result

    def restore(self) -> Restored:
        self.now += BOOT_S
        self.running = self.store = PROD
        self._step("restore")
        return Restored(True, True, f"every node runs {PROD}", "r-restore")

    def canary(self, label: str) -> Measured:
        self.now += CANARY_S
        name = label if self.running == PROD else self.running.removeprefix("h-")
        self._step(f"canary {label}")
        levels = [{"level": 1, "output_tok_s": TOK_S[label]}]
        return Measured(True, {"status": "ok", "levels": levels, "cfg": self.running,
                               "name": name})  # fmt: skip


class CountingFiles(NightFiles):
    """The results directory, counting each result and failure file written."""

    written: list[str] = []

    def write_result(self, name: str, doc: dict) -> None:
        self.written.append(result_name(name))
        super().write_result(name, doc)

    def write_failure(self, name: str, doc: dict) -> None:
        self.written.append(failure_name(name))
        super().write_failure(name, doc)


VARIANTS = [
    QueuedVariant("k5", (parse_set("drafter.num_speculative_tokens=5"),), ("drafter: k 3 -> 5",)),
    QueuedVariant("no-drafter", (parse_set("drafter=null"),), ("drafter: dflash k=3 -> off",)),
    QueuedVariant("k7", (parse_set("drafter.num_speculative_tokens=7"),), ("drafter: k 3 -> 7",)),
]


def _run(deadline_s: float = 6 * 3600.0) -> RunRecord:
    return RunRecord("plan.yml", "inv.yml", "lab", "rev0", PROD, T0, T0 + deadline_s)


def _night(tmp_path: Path, ports: FakeNight, run: RunRecord | None = None):
    files = CountingFiles(tmp_path / "results", clock=ports.clock)
    stored = files.read_run()
    queue = NightQueue(ports, files, stored or run or _run(), progress=None)
    return queue, files


def _events(files: NightFiles) -> list[tuple[str, str | None]]:
    return [(str(e["kind"]), e.get("variant")) for e in files.events()]


def test_the_night_runs_in_order_and_restores_production_measured(tmp_path: Path) -> None:
    ports = FakeNight()
    queue, files = _night(tmp_path, ports)
    queue.begin()
    out = queue.run(VARIANTS, COSTS)
    assert ports.calls == ["canary production-start", "restart k5", "canary k5",
                           "restart no-drafter", "canary no-drafter", "restart k7", "canary k7",
                           "restore", "canary production-end"]  # fmt: skip
    assert out.ok and out.done == ["k5", "no-drafter", "k7"] and not out.failed
    assert ports.running == PROD and out.restored and out.restored.restarted
    assert ports.verified == 1  # at the start; the restore knew it was on a variant: no wait
    k5 = files.result("k5")
    assert k5 is not None and k5["config_hash"] == "h-k5" and k5["rollout_id"] == "r-k5"
    assert k5["canary"]["levels"][0]["output_tok_s"] == 13.2
    assert k5["changes"] == [{"key": "drafter.num_speculative_tokens", "value": 5}]
    assert k5["started"] < k5["finished"]
    end = files.result("production-end")
    assert end is not None and end["drift"] == {"1": 0.95}  # 11.4 / 12.0
    assert end["production_start"]["levels"][0]["output_tok_s"] == 12.0
    run = files.read_run()
    assert run is not None and run.finished == ports.now
    kinds = [k for k, _ in _events(files)]
    assert kinds == ["run_begin", "production_start", "variant_begin", "variant_end",
                     "variant_begin", "variant_end", "variant_begin", "variant_end",
                     "restore_begin", "restore_end", "production_end", "run_end"]  # fmt: skip


def test_a_variant_that_no_longer_fits_is_skipped_by_the_real_time(tmp_path: Path) -> None:
    # each variant 12 min, the restore and closing canary 12 min, margin 5: a deadline of
    # 2 + 12 + 12 + 5 + 3 min holds the opening canary and one variant, not a second
    ports = FakeNight()
    queue, files = _night(tmp_path, ports, _run(deadline_s=34 * 60.0))
    queue.begin()
    out = queue.run(VARIANTS, COSTS)
    assert out.done == ["k5"] and set(out.skipped) == {"no-drafter", "k7"}
    assert "needs 12.0 min + 12.0 min to restore" in out.skipped["no-drafter"]
    assert files.failure("no-drafter") is None and files.result("no-drafter") is None  # an event
    assert ("variant_skipped", "no-drafter") in _events(files)
    assert ports.calls[-2:] == ["restore", "canary production-end"] and out.ok


def test_a_failed_variant_is_recorded_with_its_root_cause_and_the_night_goes_on(
    tmp_path: Path,
) -> None:
    ports = FakeNight(fails=["no-drafter"])
    queue, files = _night(tmp_path, ports)
    queue.begin()
    out = queue.run(VARIANTS, COSTS)
    assert out.done == ["k5", "k7"] and list(out.failed) == ["no-drafter"]
    failed = files.failure("no-drafter")
    assert failed is not None and failed["stage"] == "restart"
    assert failed["error"] == "new config failed at boot after 12.7 s: CUDA out of memory"
    assert failed["rollout_step"] == "rolled_back" and failed["rollout_id"] == "r-no-drafter"
    assert "canary no-drafter" not in ports.calls  # nothing measured on a config that never ran
    assert ("variant_failed", "no-drafter") in _events(files) and out.ok


def test_when_every_variant_failed_production_is_verified_not_restarted(tmp_path: Path) -> None:
    ports = FakeNight(fails=["k5", "no-drafter", "k7"])
    queue, files = _night(tmp_path, ports)
    queue.begin()
    out = queue.run(VARIANTS, COSTS)
    assert "restore" not in ports.calls and out.restored and not out.restored.restarted
    assert out.ok and files.result("production-end") is not None


def test_a_night_does_not_start_on_a_cluster_off_production(tmp_path: Path) -> None:
    ports = FakeNight()
    ports.running = "something-else"
    queue, files = _night(tmp_path, ports)
    with pytest.raises(NotOnProduction, match="tpwarden up"):
        queue.begin()
    assert files.read_run() is None and ports.calls == []


STEPS = 9  # the whole night's port steps (the first test)


@pytest.mark.parametrize("kill_after", range(1, STEPS + 1))
def test_a_night_killed_after_any_step_and_resumed_repeats_nothing(
    tmp_path: Path, kill_after: int
) -> None:
    CountingFiles.written = []
    ports = FakeNight(kill_after=kill_after)
    queue, files = _night(tmp_path, ports)
    queue.begin()
    with pytest.raises(Killed):
        queue.run(VARIANTS, COSTS)
    files.close()
    left_on_variant = ports.store != PROD
    ports.kill_after, ports.calls = None, []
    queue, files = _night(tmp_path, ports)  # the run record read back, as --resume does
    queue.bring_back()
    out = queue.run(VARIANTS, COSTS)
    if left_on_variant:
        assert ports.calls[0] == "restore"  # production first, before anything is measured
    assert ports.running == PROD and out.ok
    names = [n for n in CountingFiles.written if n.endswith(".result.json")]
    assert sorted(names) == sorted({*names}), names  # no result written twice
    assert set(names) >= {result_name(v.name) for v in VARIANTS} | {
        result_name("production-start"), result_name("production-end")}  # fmt: skip
    assert "canary production-start" not in ports.calls or kill_after == 1


def test_a_resumed_night_with_nothing_left_only_closes(tmp_path: Path) -> None:
    ports = FakeNight()
    queue, files = _night(tmp_path, ports)
    queue.begin()
    queue.run(VARIANTS, COSTS)
    ports.calls = []
    queue, files = _night(tmp_path, ports)
    assert queue.bring_back() is None  # left on production
    queue.run(VARIANTS, COSTS)
    assert ports.calls == ["canary production-end"]  # verified on production: no restart


def test_left_on_and_drift() -> None:
    assert left_on("done", "a", "b") == "b"
    assert left_on("rolled_back", "a", "b") == left_on("refused", "a", "b") == "a"
    assert left_on("failed", "a", "b") is None and left_on("restarting", "a", "b") is None
    start = {"levels": [{"level": 1, "output_tok_s": 10.0}, {"level": 8, "output_tok_s": 40.0}]}
    end = {"levels": [{"level": 1, "output_tok_s": 9.0}, {"level": 8, "output_tok_s": None}]}
    assert drift(start, end) == {"1": 0.9}


# -- the CLI: refusals before anything runs ----------------------------------------------------
runner = CliRunner()


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TPWARDEN_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


def _plan(tmp_path: Path, body: str) -> Path:
    plan = tmp_path / "night.yml"
    plan.write_text('restore_by: "+06:00"\n' + body)
    return plan


def _run_cli(plan: Path, *extra: str):
    return runner.invoke(app, ["experiment", "run", str(plan), "-i", str(GOOD), *extra],
                         terminal_width=200)  # fmt: skip


K5 = "variants:\n  - name: k5\n    set: [drafter.num_speculative_tokens=5]\n"


@pytest.mark.parametrize(
    ("body", "line", "what"),
    [
        (K5 + "  - name: thinking\n    request: {chat_template_kwargs: {enable_thinking: true}}\n",
         6, "variants[1].request: variant 'thinking': per-request changes are not measured"),
        ("bench: quick\n" + K5, 2, "bench: bench presets are not run"),
        ("eval: {preset: gsm8k, limit: 10}\n" + K5, 2, "eval: eval presets are not run"),
    ],
)  # fmt: skip
def test_what_this_step_cannot_measure_is_refused_at_its_line(
    state: Path, tmp_path: Path, body: str, line: int, what: str
) -> None:
    plan = _plan(tmp_path, body)
    res = _run_cli(plan, "--json")
    assert res.exit_code == 2, res.output
    doc = json.loads(res.stdout)
    assert doc["error"]["message"].startswith(f"{plan}:{line}: {what}"), doc["error"]
    assert not (state / "experiment").exists()  # nothing written, no lock taken


def test_a_second_night_beside_a_running_one_is_refused_naming_it(
    state: Path, tmp_path: Path
) -> None:
    plan = _plan(tmp_path, K5)
    lock = rollout_lock_path(GOOD)
    with one_actor(lock, "tpwarden experiment run other.yml by ops@control"):
        res = _run_cli(plan)
        status = runner.invoke(app, ["experiment", "status", str(plan), "-i", str(GOOD),
                                     "--json"])  # fmt: skip
    assert res.exit_code == 2, res.output
    assert "tpwarden experiment run other.yml by ops@control" in res.output
    doc = json.loads(status.stdout)
    assert status.exit_code == 0 and "experiment run other.yml" in doc["lock_holder"]
    assert doc["run"] is None and [v["status"] for v in doc["variants"]] == ["left"]


def test_an_unfinished_night_needs_resume_and_resume_needs_a_night(
    state: Path, tmp_path: Path
) -> None:
    plan = _plan(tmp_path, K5)
    res = _run_cli(plan, "--resume")
    assert res.exit_code == 2 and "no night to resume" in res.output
    files = NightFiles(state / "experiment" / "tpwarden" / "night")
    files.write_run(_run())
    res = _run_cli(plan)
    assert res.exit_code == 2 and "is unfinished" in res.output and "--resume" in res.output


def test_the_night_s_rollouts_run_inside_the_locks_it_holds(state: Path, tmp_path: Path) -> None:
    with one_actor(rollout_lock_path(GOOD), "tpwarden experiment run night.yml by ops@control"):
        with pytest.raises(ClusterBusy, match="experiment run night.yml"):
            RolloutOperation(GOOD).__enter__()  # a rollout beside the night: refused
        with RolloutOperation(GOOD, locks_held=True) as ops:  # the night's own: no second lock
            assert ops.interrupted() is None


# -- the operation: a night killed on a variant, resumed with the cluster brought back first ---
class FakeClusterNight(ClusterNight):
    """The real ports' bookkeeping (the rollout store's revisions, the inventory's files) with
    restarts that only write the files a rollout would, and canaries that only answer."""

    running: dict[str, str] = {}  # what the cluster runs, across the killed and resumed runs
    calls: list[str] = []
    kill_at: str | None = None

    def left_on(self) -> str | None:
        return self.running.get("hash")

    def verify(self) -> tuple[bool, str]:
        return self.running.get("hash") == self.night.production_hash, "verified"

    def restart_on(self, name: str, changes: Sequence[Change]) -> VariantRestart:
        write_files(str(self.inventory), self.production()[0])
        edit = plan_edit(str(self.inventory), list(changes))
        write_files(str(self.inventory), edit.new)
        self.running["hash"] = new = spec_with(str(self.inventory), edit.new).config_hash()
        self.calls.append(f"restart {name}")
        if name == self.kill_at:
            raise Killed(name)
        return VariantRestart(True, "done", f"r-{name}", new)

    def restore(self) -> Restored:
        write_files(str(self.inventory), self.production()[0])
        self.running["hash"] = self.night.production_hash
        self.calls.append("restore")
        return Restored(True, True, "verified", "r-restore")

    def canary(self, label: str) -> Measured:
        self.calls.append(f"canary {label}")
        return Measured(True, {"status": "ok", "levels": [{"level": 1, "output_tok_s": 10.0}]})


class FakeArm:
    """`arm_guard` without a process: each night it was asked to guard."""

    armed: list[Path] = []

    def __call__(self, plan: Path, inventory: Path, files: NightFiles) -> GuardArming:
        assert files.read_run() is not None  # armed once the run record is written
        self.armed.append(files.root)
        return GuardArming(True, 4242, "pid 4242 (fake)")


@pytest.fixture
def operation(state: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The night's operation on a copy of good.yml, its ports faked, its locks a no-op (the
    lock itself: test_a_second_night_beside_a_running_one_is_refused_naming_it), its guard
    not started (the guard: test_experiment_guard*.py)."""
    inv = tmp_path / "inv.yml"
    inv.write_bytes(GOOD.read_bytes())
    FakeClusterNight.running, FakeClusterNight.calls = {}, []
    FakeArm.armed = []
    monkeypatch.setattr(experiment_run, "ClusterNight", FakeClusterNight)
    monkeypatch.setattr(experiment_run, "rollout_locks", lambda *a, **k: contextlib.nullcontext())
    monkeypatch.setattr(experiment_run, "arm_guard", FakeArm())
    plan = _plan(tmp_path, K5 + "  - name: no-drafter\n    set: [drafter=null]\n")
    return inv, plan


def test_a_night_killed_on_a_variant_resumes_with_production_back_first(operation) -> None:
    inv, plan = operation
    before = inv.read_bytes()
    FakeClusterNight.running["hash"] = production = load_inventory(inv).config_hash()
    FakeClusterNight.kill_at = "no-drafter"
    with pytest.raises(Killed):
        experiment_run.run_experiment(plan, inv)
    assert inv.read_bytes() != before  # the kill left the inventory (and cluster) on a variant
    FakeClusterNight.kill_at, FakeClusterNight.calls = None, []
    out = experiment_run.run_experiment(plan, inv, resume=True)
    assert FakeClusterNight.calls == ["restore", "restart no-drafter", "canary no-drafter",
                                      "restore", "canary production-end"]  # fmt: skip
    assert out.ok and out.done == ["no-drafter"] and inv.read_bytes() == before
    assert out.run.production_hash == production and out.run.resumed
    assert len(FakeArm.armed) == 2 and out.guard == {"started": True, "pid": 4242,
                                                     "detail": "pid 4242 (fake)"}  # fmt: skip
    again = experiment_run.run_experiment(plan, inv, resume=True)
    assert again.nothing_left and again.ok
    status = experiment_run.experiment_status(plan, inv)
    assert [v["status"] for v in status.variants] == ["done", "done"]
    assert status.run is not None and status.run.finished is not None


def test_a_finished_night_is_not_resumed_over_a_changed_production(operation) -> None:
    inv, plan = operation
    FakeClusterNight.running["hash"] = load_inventory(inv).config_hash()
    assert experiment_run.run_experiment(plan, inv).ok
    status = experiment_run.experiment_status(plan, inv)
    (status.results / result_name("k5")).unlink()  # something left of it
    inv.write_text(inv.read_text().replace("memory: 16GiB", "memory: 12GiB"))  # a rollout since
    with pytest.raises(ConfigError, match="production changed since this night finished"):
        experiment_run.run_experiment(plan, inv, resume=True)
    assert FakeClusterNight.calls[-1] == "canary production-end"  # nothing restarted
