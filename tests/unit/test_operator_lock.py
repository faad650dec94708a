"""Issue 15 (7): one actor at a time; an intentional down is never restarted; one probe verdict."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest
from tpwarden.cluster.control.controller import Controller
from tpwarden.cluster.hold import read_hold, write_hold, write_release
from tpwarden.cluster.inventory.load import load_inventory
from tpwarden.cluster.operator_lock import (
    ClusterBusy,
    clear_down,
    cluster_lock_path,
    mark_down,
    one_actor,
)
from tpwarden.watchdog.policy_state import WatchdogPhase

from .test_watchdog_daemon import REFUSED, make

ROOT = Path(__file__).resolve().parents[2]


class FileHolder:
    """The watchdog hold as WatchdogHolder writes it, on this machine only."""

    def __init__(self, path: str) -> None:
        self.path = path

    def hold(self, reason: str, until: float, kind: str = "hold") -> None:
        # set_at is the writer's wall time, as WatchdogHolder writes it: the watchdog caps a
        # hold at MAX_HOLD_S after set_at, so a fixed 0.0 here would read as long expired.
        write_hold(self.path, until=until, reason=reason, by="ops", now=time.time(), kind=kind)

    def release(self) -> None:
        write_release(self.path, by="ops", now=0.0)


def test_second_action_is_refused_naming_the_holder(tmp_path: Path) -> None:
    lock = str(tmp_path / "restart-c.lock")
    holder = FileHolder(str(tmp_path / "hold.json"))
    with one_actor(lock, "tpwarden rollout by alice", holder, hold_s=600, clock=lambda: 100.0):
        assert read_hold(holder.path)[0].until == 700.0  # the watchdog is held meanwhile
        with pytest.raises(ClusterBusy, match="tpwarden rollout by alice"):
            with one_actor(lock, "tpwarden rollout by bob"):
                pass
    assert read_hold(holder.path)[0] is None  # released with the lock
    with one_actor(lock, "tpwarden restart by bob"):
        pass


def test_cluster_lock_is_the_watchdog_restart_lock(tmp_path: Path) -> None:
    from tpwarden.watchdog.wiring import build_config

    spec = load_inventory(ROOT / "inventory.example.yml")
    cfg = build_config(spec, str(tmp_path / "wd"), environ={"TPWARDEN_API_KEY": "k"})
    assert cfg.restart_lock_path == cluster_lock_path(spec, str(tmp_path / "wd"))


def test_watchdog_restart_is_skipped_while_an_operator_restarts(tmp_path: Path) -> None:
    lock = str(tmp_path / "restart.lock")
    wd, prober, act = make(tmp_path, restart_lock_path=lock)
    wd.tick()
    with one_actor(lock, "tpwarden restart by ops"):
        prober.next = REFUSED
        for _ in range(3):
            wd.tick()
    assert act.restarts == []
    wd.close()


def test_operator_down_is_not_restarted_until_up(tmp_path: Path) -> None:
    # Reproduction (7): `tpwarden down`, then the watchdog restarted the server.
    wd, prober, act = make(tmp_path)
    wd.tick()
    holder = FileHolder(wd.config.hold_path)
    mark_down(holder, "ops", clock=wd._clock)
    prober.next = REFUSED
    for _ in range(40):  # 100 minutes of refused probes
        wd.tick()
    assert act.restarts == [] and wd.state is not None
    assert wd.state.consecutive_failures == 0
    clear_down(holder)  # `tpwarden up`
    wd.tick()
    assert wd.state.phase is WatchdogPhase.BOOTING and act.restarts == []  # fresh boot grace
    wd.close()


@pytest.mark.parametrize(
    ("status", "body", "ok"),
    [
        (200, {"choices": [{"text": "!"}]}, True),
        (200, {"object": "error"}, False),  # 200 without a completion: the watchdog's MALFORMED
        (401, {"error": {"message": "bad key"}}, False),
    ],
)
def test_status_probe_and_watchdog_agree(status: int, body: dict, ok: bool) -> None:
    seen: list[dict] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        return httpx.Response(status, json=body)

    spec = load_inventory(ROOT / "inventory.example.yml")
    http = httpx.Client(transport=httpx.MockTransport(answer))
    ctl = Controller(spec, http=http)
    try:
        assert ctl.probe(timeout=1)[0] is ok
    finally:
        ctl.close()
    assert seen[0]["max_tokens"] == 1 and seen[0]["temperature"] == 0


def test_rollout_hold_is_a_lease_that_lapses_when_its_holder_dies(tmp_path: Path) -> None:
    # Reproduction (6): a rollout killed with -9 left a 6600 s hold, the server down, no alert.
    import time

    from tpwarden.cluster.operator_lock import LeasedHolder

    holder = FileHolder(str(tmp_path / "hold.json"))
    leased = LeasedHolder(holder, lease_s=0.3)
    t0 = time.time()
    leased.hold("rollout 1", t0 + 6600)
    first = read_hold(holder.path)[0].until
    assert first <= time.time() + 0.3 < t0 + 6600
    time.sleep(0.5)
    renewed = read_hold(holder.path)[0].until
    assert renewed > first  # renewed while the holder lives
    leased._stop.set()  # the holder dies (kill -9): nobody renews
    time.sleep(0.5)
    assert read_hold(holder.path)[0].until < time.time()  # lapsed on its own
    leased.release()
    assert read_hold(holder.path)[0] is None
