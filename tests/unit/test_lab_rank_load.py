"""The lab's thermal stand-in heats with each rank's load and cools after (issue 52): the ranks'
loads from the server's /metrics and the nodes' serving containers (lab/rankload.py), the story
of the demo through the sensor driver and the real thermal agent (lab_thermal_story.py), and a
plot whose time ticks differ at every span."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from tpwarden.cluster.reports.thermal.plot import thermal_figure, tick_labels
from tpwarden.cluster.reports.thermal.report import build_report
from tpwarden.lab import rankload as rl
from tpwarden.lab import sensors

from tests.unit import lab_thermal_story as story

METRICS = 'vllm:num_requests_running{engine="0",model_name="m"} %s\n'
NODES = story.NODES


# -- each rank's load ---------------------------------------------------------------------------
def test_a_running_rank_carries_the_servers_load_a_frozen_or_removed_one_none():
    up = dict.fromkeys(NODES, "running")
    assert rl.rank_loads(0.7, up, NODES) == dict.fromkeys(NODES, 0.7)
    paused = {**up, "node3": "paused"}
    assert rl.rank_loads(0.7, paused, NODES) == {**dict.fromkeys(NODES, 0.7), "node3": 0.0}
    assert rl.rank_loads(None, up, NODES) == dict.fromkeys(NODES, rl.BOOT_LOAD)  # loading
    assert rl.rank_loads(None, {}, NODES) == dict.fromkeys(NODES, 0.0)  # removed by a restart
    assert rl.rank_loads(0.7, {"node1": "exited"}, ["node1"]) == {"node1": 0.0}


def test_live_ranks_spin_while_one_is_frozen_whatever_metrics_say():
    """Real vLLM reports 0 requests running while a lost rank hangs it; the live ranks still
    wait in the collective (on GPUs, kernels spinning): they stay warm, the frozen one cools."""
    paused = {**dict.fromkeys(NODES, "running"), "node3": "paused"}
    hung = rl.rank_loads(0.0, paused, NODES)
    assert hung["node3"] == 0.0
    assert all(hung[n] == rl.SPIN_LOAD for n in NODES if n != "node3")
    assert rl.rank_loads(0.9, paused, NODES)["node1"] == 0.9  # busier than spinning: as busy
    assert rl.rank_loads(None, paused, NODES)["node1"] == rl.SPIN_LOAD


def test_server_load_holds_a_late_answer_for_a_while_and_nothing_answering_is_no_server():
    now = [0.0]
    answers: list[Any] = [3.0]

    def handler(request: httpx.Request) -> httpx.Response:
        got = answers[0]
        if isinstance(got, Exception):
            raise got
        return httpx.Response(200, text=METRICS % got)

    server = rl.ServerLoad("http://h/metrics", clock=lambda: now[0],
                           transport=httpx.MockTransport(handler))  # fmt: skip
    assert server() == pytest.approx(rl.load_from_running(3.0))
    answers[0] = httpx.ReadTimeout("busy", request=httpx.Request("GET", "http://h/metrics"))
    now[0] = rl.LATE_HOLD_S  # a busy server answers late: its load stands in
    assert server() == pytest.approx(rl.load_from_running(3.0))
    now[0] = rl.LATE_HOLD_S + 1.0  # for a while only
    assert server() is None
    answers[0] = 0.0
    assert server() == 0.0  # answering, idle
    answers[0] = httpx.ConnectError("refused", request=httpx.Request("GET", "http://h/metrics"))
    assert server() is None  # no server
    answers[0] = httpx.ReadTimeout("x", request=httpx.Request("GET", "http://h/metrics"))
    assert server() is None  # nothing to hold after a refusal
    server.close()


class FakeApi:
    def __init__(self, rows: list[dict[str, Any]] | Exception) -> None:
        self.rows, self.filters = rows, None

    def containers(self, all: bool, filters: dict[str, Any]) -> list[dict[str, Any]]:
        self.filters = filters
        if isinstance(self.rows, Exception):
            raise self.rows
        return self.rows


class FakeClient:
    def __init__(self, rows: list[dict[str, Any]] | Exception) -> None:
        self.api = FakeApi(rows)


def _row(node: str, state: str) -> dict[str, Any]:
    return {"Labels": {"io.tpwarden.node": node, "io.tpwarden.cluster": "lab"}, "State": state}


def test_server_containers_by_node_from_one_list_call():
    client = FakeClient([_row("node1", "running"), _row("node3", "exited"),
                         _row("node3", "running"), _row("node2", "paused")])  # fmt: skip
    assert rl.ServerContainers(client)() == {"node1": "running", "node3": "running",
                                             "node2": "paused"}  # fmt: skip
    assert client.api.filters == {"label": ["io.tpwarden.cluster=lab",
                                            "io.tpwarden.component=vllm"]}  # fmt: skip
    assert rl.ServerContainers(FakeClient(OSError("no docker")))() == {}


# -- the demo's story ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def demo() -> Iterator[list[dict[str, Any]]]:
    shm = Path("/dev/shm")  # thousands of small sensor files: in memory where there is one
    with tempfile.TemporaryDirectory(dir=shm if shm.is_dir() else None) as tmp:
        yield story.demo_records(Path(tmp))


def _gpu(records: list[dict[str, Any]], node: str) -> list[tuple[float, float]]:
    return [(r["ts"] - story.DEMO_T0, r["gpus"][0]["temp_c"]) for r in records if r["node"] == node]


def _zone(records: list[dict[str, Any]], node: str, role: str) -> list[tuple[float, float]]:
    index = next(i for i, z in enumerate(sensors.GB10_ZONES) if z.role == role)
    return [(r["ts"] - story.DEMO_T0, r["zones"][index]["temp_c"])
            for r in records if r["node"] == node]  # fmt: skip


def _at(series: list[tuple[float, float]], t: float) -> float:
    return min(series, key=lambda p: abs(p[0] - t))[1]


def _peak(series: list[tuple[float, float]]) -> tuple[float, float]:
    return max(series, key=lambda p: p[1])


def test_the_stand_in_heats_with_the_load_and_cools_after(demo):
    for node in NODES:
        gpu = _gpu(demo, node)
        idle = _at(gpu, 0.0)
        assert idle == pytest.approx(40.0, abs=0.5)
        when, peak = _peak(gpu)
        assert story.LOAD[0] < when <= story.HANG[0] + 4  # hottest at the end of the load
        assert peak >= idle + 20  # not a flat line
        assert _at(gpu, story.DEMO_END) == pytest.approx(idle, abs=3.0)  # cooled after


def test_in_the_hang_the_frozen_rank_cools_and_the_waiting_ones_stay_warm(demo):
    end = story.HANG[1] - 2
    frozen = _at(_gpu(demo, "node3"), end)
    for node in ("node1", "node2", "node4"):
        waiting = _at(_gpu(demo, node), end)
        assert waiting >= _peak(_gpu(demo, node))[1] - 8
        assert waiting - frozen >= 10
    # the restart: every rank cools at once (containers removed), then a little for the boot
    after = story.HANG[1] + 8
    assert all(_at(_gpu(demo, n), after) < _at(_gpu(demo, n), story.HANG[1]) for n in NODES)


def test_zones_follow_the_gpu_with_a_lag_and_the_head_runs_hotter(demo):
    for node in NODES:
        gpu_peak_at = _peak(_gpu(demo, node))[0]
        assert _peak(_zone(demo, node, "gpu"))[0] >= gpu_peak_at  # the zone peaks later
        zone_start = _at(_zone(demo, node, "gpu"), story.LOAD[0] + 30)
        gpu_start = _at(_gpu(demo, node), story.LOAD[0] + 30)
        assert zone_start - _at(_zone(demo, node, "gpu"), story.LOAD[0]) < gpu_start - 40
    head = _peak(_zone(demo, "node1", "cpu_pcore_0"))[1]
    for worker in ("node2", "node3", "node4"):
        assert head >= _peak(_zone(demo, worker, "cpu_pcore_0"))[1] + 5


# -- the plot's time axis -----------------------------------------------------------------------
def _labels(records: list[dict[str, Any]], since: float, until: float) -> list[str]:
    rep = build_report(records, since=since, until=until, zone_roles=story.ZONE_ROLES)
    fig = thermal_figure(rep, records, story.KST, story.ZONE_ROLES)
    try:
        fig.canvas.draw()
        return [t.get_text() for t in fig.axes[-1].get_xticklabels() if t.get_text()]
    finally:
        import matplotlib.pyplot as plt  # deferred: matplotlib after the figure chose Agg

        plt.close(fig)


def _flat_night(hours: float) -> list[dict[str, Any]]:
    """A GPU reading a minute on every node: enough for the axis of a long span."""
    t0 = story.NIGHT_T0
    return [
        {"ts": t0 + 60 * k, "node": node, "interval_s": 60.0, "gpus": [{"temp_c": 50.0}],
         "zones": []}
        for k in range(int(hours * 60) + 1) for node in NODES
    ]  # fmt: skip


@pytest.mark.parametrize("span_s", [40, 180, 600])
def test_time_ticks_differ_at_a_demos_spans(demo, span_s):
    since = story.DEMO_T0 + 200
    labels = _labels(demo, since, since + span_s)
    assert len(labels) >= 3
    assert len(set(labels)) == len(labels), labels


@pytest.mark.parametrize("hours", [2, 10, 30])
def test_time_ticks_differ_at_a_nights_spans(hours):
    records = _flat_night(hours)
    labels = _labels(records, story.NIGHT_T0, story.NIGHT_T0 + hours * 3600)
    assert len(set(labels)) == len(labels) >= 3, labels
    if hours > 2:  # across midnight: the day is named where it begins
        assert any("Tue 08" in label for label in labels), labels


def test_tick_labels():
    t = datetime(2026, 12, 7, 20, 51, tzinfo=story.KST)
    minutes = [t + timedelta(minutes=k) for k in range(3)]
    assert tick_labels(minutes) == ["20:51", "20:52", "20:53"]
    halves = [t + timedelta(seconds=30 * k) for k in range(3)]
    assert tick_labels(halves) == ["20:51:00", "20:51:30", "20:52:00"]  # not 20:51, 20:51
    night = [t + timedelta(hours=2 * k) for k in range(4)]
    assert tick_labels(night) == ["Mon 07\n20:51", "22:51", "Tue 08\n00:51", "02:51"]
    fine = [t + timedelta(milliseconds=250 * k) for k in range(3)]
    assert tick_labels(fine) == ["20:51:00.000", "20:51:00.250", "20:51:00.500"]
    assert tick_labels([]) == []
