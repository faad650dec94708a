"""Rollout sequence and rollback rules, with a fake cluster, bench, hold and clock."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from tpwarden.cluster.errors import ConfigError, TpwardenError
from tpwarden.cluster.inventory.load import load_inventory
from tpwarden.cluster.rollout.edit import apply_changes, parse_guard, parse_set, text_diff
from tpwarden.cluster.rollout.sequence import (
    Measurement,
    RestartOutcome,
    Rollout,
    RolloutInProgress,
    RolloutPorts,
    RolloutStore,
    rollback_to,
)

ROOT = Path(__file__).resolve().parents[2]


class FakeCluster:
    def __init__(self, fail_hashes=(), crash_on_restart=False, preflight=(), raise_for=()):
        self.restarts = []
        self.fail_hashes = set(fail_hashes)
        self.crash_on_restart = crash_on_restart
        self.preflight_problems = list(preflight)
        self.raise_for = set(raise_for)  # config hashes whose restart raises (pre-flight, SSH)
        self.preflights = []
        self.running = None
        self.failure_why = ""  # what the cluster says of a failed restart ("" : nothing)

    def preflight(self, spec):
        self.preflights.append(spec.serving.drafter.num_speculative_tokens)
        return self.preflight_problems

    def restart(self, spec, why, timeout_s):
        self.restarts.append((spec.serving.drafter.num_speculative_tokens, why))
        if self.crash_on_restart:
            raise KeyboardInterrupt("killed mid-restart")
        if spec.config_hash() in self.raise_for:
            raise TpwardenError("pre-flight failed:\n  node1: /models/missing does not exist")
        ok = spec.config_hash() not in self.fail_hashes
        self.running = spec.config_hash() if ok else None
        return RestartOutcome(ok, "" if ok else self.failure_why)

    def probe(self, spec):
        return (self.running == spec.config_hash(), "probe")

    def stop(self, spec, why):
        self.restarts.append(("stop", why))
        self.running = None

    def wait_running(self, spec, timeout_s):
        # the watchdog restarts the server on whatever the inventory says now
        from tpwarden.cluster.inventory.load import load_inventory

        current = load_inventory(spec.source_file)
        self.restarts.append(("watchdog", current.serving.drafter.num_speculative_tokens))
        if current.config_hash() in self.fail_hashes:
            return False
        self.running = current.config_hash()
        return self.running == spec.config_hash()


class FakeHolder:
    def __init__(self):
        self.calls = []

    def hold(self, reason, until):
        self.calls.append(("hold", reason))

    def release(self):
        self.calls.append(("release", None))


def fake_measure(spec, label):
    k = spec.serving.drafter.num_speculative_tokens
    # the field report's shape: k=3 loses at c=1 and wins at c=32
    rows = {
        1: {"aggregate": 12.7 if k == 7 else 11.1},
        32: {"aggregate": 144.8 if k == 7 else 171.0},
    }
    return Measurement(rows, run_dir=f"runs/{label}", config_hash=spec.config_hash())


@pytest.fixture
def inv(tmp_path):
    path = tmp_path / "inventory.yml"
    text = (
        (ROOT / "inventory.example.yml")
        .read_text()
        .replace("num_speculative_tokens: 3", "num_speculative_tokens: 7")
    )
    path.write_text(text)
    return path


def _rollout(tmp_path, cluster, measure=fake_measure):
    holder = FakeHolder()
    store = RolloutStore(tmp_path / "state")
    return (
        Rollout(store, RolloutPorts(cluster, holder, measure, clock=lambda: 1_767_000_000.0)),
        store,
        holder,
    )


def test_k7_to_k3_keeps_the_change_with_a_minimal_diff(tmp_path, inv):
    before = inv.read_text()
    cluster = FakeCluster()
    ro, store, holder = _rollout(tmp_path, cluster)
    guard = parse_guard("c=32 aggregate >= -5%")
    record = ro.prepare(str(inv), [parse_set("drafter.num_speculative_tokens=3")], [guard])
    result = ro.run(record, [guard])
    assert result.step == "done"
    diff = [
        line
        for line in text_diff(before, inv.read_text(), "inv").splitlines()
        if line[:1] in "+-" and line[:3] not in ("---", "+++")
    ]
    assert diff == ["-        num_speculative_tokens: 7", "+        num_speculative_tokens: 3"]
    assert load_inventory(inv).config_hash() == result.new_hash != result.old_hash
    assert [k for k, _ in cluster.restarts] == [3]
    assert holder.calls[0][0] == "hold" and holder.calls[-1] == ("release", None)
    assert result.verdicts[0]["ok"] and result.verdicts[0]["change_pct"] == pytest.approx(
        18.09, abs=0.01
    )
    assert [h["step"] for h in store.history()] == ["done"]


def test_boot_failure_rolls_back_to_the_old_revision(tmp_path, inv):
    before = inv.read_text()
    new_hash = load_inventory_hash(
        apply_changes(before, [parse_set("drafter.num_speculative_tokens=3")], str(inv))
    )
    cluster = FakeCluster(fail_hashes={new_hash})
    ro, store, holder = _rollout(tmp_path, cluster)
    result = ro.run(ro.prepare(str(inv), [parse_set("drafter.num_speculative_tokens=3")], []), [])
    assert result.step == "rolled_back" and "not answering within" in result.reason
    assert inv.read_text() == before
    assert [k for k, _ in cluster.restarts] == [3, 7]
    assert cluster.running == load_inventory(inv).config_hash()
    history = store.history()
    assert len(history) == 1 and history[0]["step"] == "rolled_back"
    assert holder.calls[-1] == ("release", None)


def test_failed_guard_rolls_back(tmp_path, inv):
    ro, store, _ = _rollout(tmp_path, FakeCluster())
    guard = parse_guard("c=1 aggregate >= -5%")  # k=3 loses 12.6% at c=1
    result = ro.run(
        ro.prepare(str(inv), [parse_set("drafter.num_speculative_tokens=3")], [guard]), [guard]
    )
    assert result.step == "rolled_back" and "guard failed" in result.reason
    assert "num_speculative_tokens: 7" in inv.read_text()


def test_killed_midway_then_resume_or_abort_ends_defined(tmp_path, inv):
    ro, store, _ = _rollout(tmp_path, FakeCluster(crash_on_restart=True), measure=None)
    record = ro.prepare(str(inv), [parse_set("drafter.num_speculative_tokens=3")], [])
    with pytest.raises(KeyboardInterrupt):
        ro.run(record, [])
    current = store.current()
    assert current.step == "restarting"
    assert "num_speculative_tokens: 3" in inv.read_text()  # the new config was written
    again, _, _ = _rollout(tmp_path, FakeCluster(), measure=None)
    with pytest.raises(RolloutInProgress):
        again.prepare(str(inv), [parse_set("drafter.num_speculative_tokens=5")], [])
    resumed = again.resume(current, [])
    assert resumed.step == "done" and store.current().step == "done"
    # and the other choice: abort an interrupted one
    ro2, store2, _ = _rollout(tmp_path / "b", FakeCluster(crash_on_restart=True), measure=None)
    inv2 = tmp_path / "inv2.yml"
    shutil.copy(inv, inv2)
    with pytest.raises(KeyboardInterrupt):
        ro2.run(ro2.prepare(str(inv2), [parse_set("drafter.num_speculative_tokens=5")], []), [])
    aborted, _, _ = _rollout(tmp_path / "b", FakeCluster(), measure=None)
    result = aborted.abort(store2.current(), "operator chose rollback")
    assert result.step == "rolled_back" and "num_speculative_tokens: 3" in inv2.read_text()


def test_rollback_command_restores_previous_revision(tmp_path, inv):
    cluster = FakeCluster()
    ro, store, holder = _rollout(tmp_path, cluster, measure=None)
    ro.run(ro.prepare(str(inv), [parse_set("drafter.num_speculative_tokens=3")], []), [])
    result = rollback_to(store, ro.ports, str(inv), None)
    assert result.step == "done" and "num_speculative_tokens: 7" in inv.read_text()
    assert [h["step"] for h in store.history()] == ["done", "done"]


def test_bad_changes_are_refused_before_anything_runs(tmp_path, inv):
    before = inv.read_text()
    ro, store, _ = _rollout(tmp_path, FakeCluster())
    for item in (
        "drafter.num_speculative_tokens=0",
        "drafter.num_speculative_tokenz=3",
        "parallel=4",
        "nokey",
    ):
        with pytest.raises(ConfigError):
            ro.prepare(str(inv), [parse_set(item)], [])
    assert inv.read_text() == before and store.current() is None
    with pytest.raises(ConfigError):
        parse_guard("c=32 goodness >= 5%")


def test_set_quotes_strings_and_keeps_comments(tmp_path, inv):
    text = inv.read_text()
    new = apply_changes(
        text, [parse_set("kv_cache.memory=24GiB"), parse_set("env.NCCL_IB_DISABLE=1")], str(inv)
    )
    assert "        memory: 24GiB            # per GPU\n" in new
    assert "        NCCL_IB_DISABLE: 1\n" in new  # the quoted "0" replaced, quotes and all


def load_inventory_hash(text):
    from tpwarden.cluster.inventory.load import parse_inventory

    return parse_inventory(text).config_hash()


def test_via_watchdog_stops_and_lets_the_watchdog_restart(tmp_path, inv):
    cluster = FakeCluster()
    holder = FakeHolder()
    store = RolloutStore(tmp_path / "state")
    ports = RolloutPorts(cluster, holder, None, clock=lambda: 1_767_000_000.0, via="watchdog")
    ro = Rollout(store, ports)
    result = ro.run(ro.prepare(str(inv), [parse_set("drafter.num_speculative_tokens=3")], []), [])
    assert result.step == "done" and result.via == "watchdog"
    assert [r[0] for r in cluster.restarts] == ["stop", "watchdog"] and cluster.restarts[1][1] == 3
    assert holder.calls == []  # the watchdog must act: it is not held


def test_via_watchdog_rollback_holds_the_watchdog(tmp_path, inv):
    new_hash = load_inventory_hash(
        apply_changes(inv.read_text(), [parse_set("drafter.num_speculative_tokens=3")], str(inv))
    )
    cluster = FakeCluster(fail_hashes={new_hash})
    holder = FakeHolder()
    ports = RolloutPorts(cluster, holder, None, clock=lambda: 1_767_000_000.0, via="watchdog")
    ro = Rollout(RolloutStore(tmp_path / "state"), ports)
    result = ro.run(ro.prepare(str(inv), [parse_set("drafter.num_speculative_tokens=3")], []), [])
    assert result.step == "rolled_back" and "num_speculative_tokens: 7" in inv.read_text()
    assert [c[0] for c in holder.calls] == ["hold", "release"]


def test_preflight_refusal_changes_nothing_and_is_recorded(tmp_path, inv):
    # Issue 15 (8): `--set drafter.path=/models/missing-drafter`: the inventory was written,
    # the restart's pre-flight refused, and the rollout stayed "interrupted at 'restarting'".
    before = inv.read_text()
    cluster = FakeCluster(preflight=["node1: /models/missing-drafter does not exist"])
    ro, store, holder = _rollout(tmp_path, cluster)
    record = ro.prepare(str(inv), [parse_set("drafter.path=/models/missing-drafter")], [])
    result = ro.run(record, [])
    assert result.step == "refused" and "missing-drafter does not exist" in result.reason
    assert inv.read_text() == before and cluster.restarts == []
    assert [h["step"] for h in store.history()] == ["refused"]
    assert store.current().step == "refused"  # terminal: the next rollout is not blocked
    assert ro.prepare(str(inv), [parse_set("drafter.num_speculative_tokens=3")], [])


def test_failure_after_the_write_rolls_back_by_itself(tmp_path, inv):
    before = inv.read_text()
    new_hash = load_inventory_hash(
        apply_changes(before, [parse_set("drafter.num_speculative_tokens=3")], str(inv))
    )
    cluster = FakeCluster(raise_for={new_hash})
    ro, store, holder = _rollout(tmp_path, cluster, measure=None)
    result = ro.run(ro.prepare(str(inv), [parse_set("drafter.num_speculative_tokens=3")], []), [])
    assert result.step == "rolled_back" and "restart on the new config failed" in result.reason
    assert inv.read_text() == before
    assert [h["step"] for h in store.history()] == ["rolled_back"]


def test_rollback_reports_progress_and_keeps_the_path(tmp_path, inv):
    # Issue 18: rollback built its ports positionally and put `on_event` into `via`, so
    # `tpwarden rollback` never printed progress (and took a function for its restart path).
    cluster, events = FakeCluster(), []
    ro, store, _ = _rollout(tmp_path, cluster, measure=None)
    ro.run(ro.prepare(str(inv), [parse_set("drafter.num_speculative_tokens=3")], []), [])
    ports = RolloutPorts(
        cluster, FakeHolder(), None, clock=lambda: 1_767_000_000.0,
        on_event=lambda kind, data: events.append(kind),
    )  # fmt: skip
    result = rollback_to(store, ports, str(inv), None)
    assert result.step == "done" and events, events


def test_a_boot_crash_is_recorded_as_that_crash_not_as_a_timeout(tmp_path, inv):
    """Issue 30 item 5: the restart's own verdict reaches the record (it was reduced to a bool,
    and a crash at 12.7 s read "new config not answering within 120 s")."""
    before = inv.read_text()
    new_hash = load_inventory_hash(
        apply_changes(before, [parse_set("drafter.num_speculative_tokens=3")], str(inv))
    )
    cluster = FakeCluster(fail_hashes={new_hash})
    cluster.failure_why = "new config failed at boot after 12.7 s: out of memory: CUDA OOM"
    ro, store, _ = _rollout(tmp_path, cluster)
    result = ro.run(ro.prepare(str(inv), [parse_set("drafter.num_speculative_tokens=3")], []), [])
    assert result.step == "rolled_back"
    assert result.reason == cluster.failure_why
    assert store.history()[-1]["reason"] == cluster.failure_why
