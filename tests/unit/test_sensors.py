"""The lab's sensor model: pure steps, state and zone writers, the tick driver, /metrics load."""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path

import httpx
import pytest
from tpwarden.lab import rankload as rl
from tpwarden.lab import sensors as s


def run(
    state: s.NodeThermal, load: float, seconds: float, dt_s: float = 10.0
) -> list[s.NodeThermal]:
    out = []
    for _ in range(int(seconds / dt_s)):
        state = s.step(state, load, dt_s, clock_cap_mhz=2000)
        out.append(state)
    return out


def test_load_heats_monotonically_toward_target_and_idle_cools() -> None:
    hot = run(s.idle_state(is_head=False), 1.0, 1800)
    gpu = [x.gpu_temp_c for x in hot]
    assert all(b >= a for a, b in pairwise(gpu))
    assert 63.0 <= gpu[-1] <= 66.0  # field report: GPU 63-66 C under load with the 2000 cap
    gpu_zone = hot[-1].zone_temps_c[5]
    assert 66.0 <= gpu_zone <= 70.0
    cool = run(hot[-1], 0.0, 1800)
    temps = [x.gpu_temp_c for x in cool]
    assert all(b <= a for a, b in pairwise(temps))
    assert temps[-1] == pytest.approx(40.0, abs=1.0)


def test_uncapped_gpu_runs_hotter() -> None:
    capped = s.step(s.idle_state(False), 1.0, 3600, clock_cap_mhz=2000)
    free = s.step(s.idle_state(False), 1.0, 3600, clock_cap_mhz=0)
    assert free.gpu_temp_c - capped.gpu_temp_c == pytest.approx(10.0, abs=1.5)


def test_head_cpu_zones_are_about_ten_degrees_hotter() -> None:
    head = run(s.idle_state(is_head=True), 1.0, 3600)[-1]
    worker = run(s.idle_state(is_head=False), 1.0, 3600)[-1]
    pcore = s.GB10_ZONES.index(next(z for z in s.GB10_ZONES if z.role == "cpu_pcore_0"))
    assert head.zone_temps_c[pcore] == pytest.approx(82.0, abs=1.5)
    assert 68.0 <= worker.zone_temps_c[pcore] <= 75.0
    assert head.zone_temps_c[pcore] - worker.zone_temps_c[pcore] == pytest.approx(10.0, abs=1.0)
    assert head.gpu_temp_c == pytest.approx(worker.gpu_temp_c)


def test_energy_integrates_power() -> None:
    state = s.step(s.idle_state(False), 1.0, 10.0, clock_cap_mhz=2000)
    assert state.energy_mj == pytest.approx(s.power_mw(1.0, 2000) * 10.0)


def test_heat_override_holds_then_expires() -> None:
    state = s.with_heat(s.idle_state(False), s.GPU, 97.0, duration_s=20.0)
    state = s.step(state, 0.0, 10.0)
    assert state.gpu_temp_c == 97.0 and state.overrides
    fields = s.gpu_state_fields(state)
    assert int(fields["clock_event_reasons"], 16) & s.REASON_HW_THERMAL_SLOWDOWN
    state = s.step(state, 0.0, 10.0)
    assert not state.overrides
    state = s.step(state, 0.0, 10.0)
    assert state.gpu_temp_c < 97.0
    zone = s.step(s.with_heat(s.idle_state(False), 3, 101.0, 5.0), 0.0, 1.0)
    assert zone.zone_temps_c[3] == 101.0
    with pytest.raises(ValueError):
        s.with_heat(s.idle_state(False), 7, 90.0, 1.0)


def test_zone_files_have_sysfs_format(tmp_path: Path) -> None:
    temps = [40.5, 70.0, 69.0, 60.0, 59.0, 68.25, 50.0]
    s.write_thermal_zones(tmp_path, temps)
    zones = sorted(p.name for p in tmp_path.iterdir())
    assert zones == [f"thermal_zone{i}" for i in range(7)]
    z5 = tmp_path / "thermal_zone5"
    assert (z5 / "temp").read_text() == "68250\n"
    assert (z5 / "type").read_text() == "acpitz\n"
    assert (z5 / "mode").read_text() == "enabled\n"
    assert (z5 / "policy").read_text() == "step_wise\n"
    for zone in tmp_path.iterdir():
        trips = {
            (zone / f"trip_point_{i}_type").read_text().strip(): int(
                (zone / f"trip_point_{i}_temp").read_text()
            )
            for i in range(3)
        }
        assert trips["critical"] == 104800
        assert trips["passive"] < trips["hot"] < trips["critical"]
    assert not [p for p in tmp_path.rglob(".*")]  # no temp files left behind


def test_gpu_state_writer_keeps_a_cap_set_by_nvml(tmp_path: Path) -> None:
    path = tmp_path / "gpu" / "state"
    s.write_gpu_state(path, {"temp_c": 40})
    assert s.read_gpu_state(path)["locked_clock_max_mhz"] == "0"
    # the stub (as root) rewrites the file with a cap ...
    path.write_text(path.read_text().replace("locked_clock_max_mhz=0", "locked_clock_max_mhz=2000"))
    # ... and the sensor model's next write keeps it, even if asked to write a value
    s.write_gpu_state(path, {"temp_c": 55, "locked_clock_max_mhz": 0})
    state = s.read_gpu_state(path)
    assert state["temp_c"] == "55" and state["locked_clock_max_mhz"] == "2000"
    assert s.read_clock_cap_mhz(path) == 2000
    s.write_gpu_state(path, {"temp_c": 41}, reset_clocks=True)  # node boot clears it
    assert s.read_clock_cap_mhz(path) == 0


def test_driver_tick_writes_every_node(tmp_path: Path) -> None:
    nodes = [
        s.NodeSensorPaths(
            f"node{i}", tmp_path / f"n{i}" / "state", tmp_path / f"n{i}" / "thermal", i == 1
        )
        for i in (1, 2)
    ]
    now = [0.0]
    loads = {"node1": 1.0, "node2": 1.0}
    driver = s.SensorDriver(nodes, lambda: loads, clock=lambda: now[0])
    for node in nodes:
        driver.boot(node.name)
    nodes[0].gpu_state_path.write_text(
        nodes[0]
        .gpu_state_path.read_text()
        .replace("locked_clock_max_mhz=0", "locked_clock_max_mhz=2000")
    )
    for t in range(0, 3600, 60):
        now[0] = float(t)
        driver.tick()
    head = s.read_gpu_state(nodes[0].gpu_state_path)
    worker = s.read_gpu_state(nodes[1].gpu_state_path)
    assert head["locked_clock_max_mhz"] == "2000" and worker["locked_clock_max_mhz"] == "0"
    assert 63 <= int(head["temp_c"]) <= 66
    assert int(worker["temp_c"]) > int(head["temp_c"])  # uncapped worker runs hotter
    assert head["util_pct"] == "100" and head["pstate"] == "0"
    assert int(head["energy_mj"]) > 0 and head["gpu_name"] == "NVIDIA GB10"
    assert head["uuid"] != worker["uuid"]
    head_pcore = int((nodes[0].thermal_dir / "thermal_zone1" / "temp").read_text())
    worker_pcore = int((nodes[1].thermal_dir / "thermal_zone1" / "temp").read_text())
    assert head_pcore - worker_pcore == pytest.approx(10000, abs=1000)
    loads.update(node1=0.0, node2=0.0)
    now[0] += 10
    driver.tick()
    assert s.read_gpu_state(nodes[0].gpu_state_path)["clock_event_reasons"] == "0x1"  # gpu_idle


METRICS = """\
# HELP vllm:num_requests_running Number of requests currently running.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="glm"} 3.0
vllm:num_requests_running_total_bogus 99
vllm:num_requests_waiting{engine="0",model_name="glm"} 5.0
"""


def test_metrics_load_source_reads_running_requests() -> None:
    """Every running rank carries the server's load (rankload.py; this was MetricsLoadSource)."""
    assert rl.running_requests(METRICS) == 3.0
    transport = httpx.MockTransport(lambda request: httpx.Response(200, text=METRICS))
    server = rl.ServerLoad("http://127.0.0.11:8000/metrics", transport=transport)
    running = {"node1": "running", "node2": "running"}
    source = rl.RankLoadSource(server, lambda: running, ["node1", "node2"])
    loads = source()
    assert loads["node1"] == loads["node2"] == pytest.approx(rl.load_from_running(3.0))
    assert 0.5 < loads["node1"] < 1.0
    server.close()


def test_metrics_load_source_unreachable_is_idle() -> None:
    """No server and no serving container (a restart removed them): every rank idle."""

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    gone = rl.ServerLoad("http://127.0.0.11:8000/metrics", transport=httpx.MockTransport(refuse))
    source = rl.RankLoadSource(gone, lambda: {}, ["node1"])
    assert source() == {"node1": 0.0}
    failing = rl.ServerLoad(
        "http://x/metrics", transport=httpx.MockTransport(lambda r: httpx.Response(503))
    )
    assert rl.RankLoadSource(failing, lambda: {}, ["node1"])() == {"node1": 0.0}


def test_cool_ends_a_heat_override_before_it_expires(tmp_path: Path) -> None:
    node = s.NodeSensorPaths("node2", tmp_path / "state", tmp_path / "thermal", False)
    now = [0.0]
    loads = {"node2": 1.0}
    driver = s.SensorDriver([node], lambda: loads, clock=lambda: now[0])
    driver.boot("node2")
    driver.heat("node2", "gpu", 50.0, 600.0)
    for t in range(0, 600, 60):  # full load, but the override pins 50 C
        now[0] = float(t)
        driver.tick()
    assert int(s.read_gpu_state(node.gpu_state_path)["temp_c"]) == 50
    driver.cool("node2")
    for t in range(600, 1800, 60):
        now[0] = float(t)
        driver.tick()
    assert int(s.read_gpu_state(node.gpu_state_path)["temp_c"]) > 55  # load heats it again
