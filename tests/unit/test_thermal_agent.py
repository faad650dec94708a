"""Thermal agent: wall-clock grid with a fake clock, record shape, alerts, /metrics."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from servectl.watchdog.thermal.agent import ThermalAgent
from servectl.watchdog.thermal.alerts import AlertPolicy
from servectl.watchdog.thermal.fakes import (
    FakeGpuSampler,
    build_fake_sysfs,
    gb10_sample,
    set_zone_temps,
)
from servectl.watchdog.thermal.metrics import MetricsServer, ThermalCollector
from servectl.watchdog.thermal.zones import SysfsZoneReader


class FakeClock:
    def __init__(self, now: float) -> None:
        self.now = now
        self.sleeps: list[float] = []
        self.oversleep: dict[int, float] = {}  # sleep call number -> extra seconds

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s + self.oversleep.get(len(self.sleeps), 0.0)
        self.sleeps.append(s)


class ListWriter:
    def __init__(self, fail: bool = False) -> None:
        self.records: list[dict[str, Any]] = []
        self.fail = fail

    def write(self, record: dict[str, Any]) -> bool:
        if self.fail:
            return False
        json.dumps(record, allow_nan=False)  # every record must be valid JSON
        self.records.append(record)
        return True


def make_agent(tmp_path: Path, clock: FakeClock, **kw: Any) -> tuple[ThermalAgent, ListWriter]:
    writer = kw.pop("writer", ListWriter())
    gpu = kw.pop("gpu", FakeGpuSampler())
    reader = SysfsZoneReader(build_fake_sysfs(tmp_path / "sys"))
    agent = ThermalAgent("node1", 10.0, gpu, reader, writer, clock, clock.sleep, **kw)
    return agent, writer


def test_grid_late_tick_no_doubling_skipped_slots(tmp_path: Path) -> None:
    clock = FakeClock(1000.0)
    agent, w = make_agent(tmp_path, clock)
    agent.anchor(1000.0)
    assert agent.tick()["late_s"] == 0.0
    clock.now = 1013.0  # slot 1 (1010) taken 3 s late
    r = agent.tick()
    assert (r["slot_ts"], r["late_s"], r["skipped_slots"]) == (1010.0, 3.0, 0)
    clock.now = 1019.0  # slot 2 is not due yet: no second sample for slot 1
    assert agent.tick() is None
    clock.now = 1020.0  # exactly on slot 2
    assert agent.tick()["late_s"] == 0.0
    clock.now = 1047.0  # slots 3 (1030) and 4 (1040) passed: take 4 late, skip 3
    r = agent.tick()
    assert (r["slot_ts"], r["late_s"], r["skipped_slots"]) == (1040.0, 7.0, 1)
    clock.now = 1049.0
    assert agent.tick() is None
    assert [x["seq"] for x in w.records] == [1, 2, 3, 4]
    assert agent.stats.samples == 4
    assert agent.stats.late_ticks == 2  # 3 s and 7 s late; on-time ticks are not late
    assert agent.stats.skipped_slots == 1


def test_run_stays_on_grid_without_drift(tmp_path: Path) -> None:
    clock = FakeClock(1003.7)
    clock.oversleep = {5: 2.5, 9: 35.0}  # one late wake-up, one long stall (3 slots lost)
    agent, w = make_agent(tmp_path, clock)
    agent.run(max_samples=20)
    slots = [r["slot_ts"] for r in w.records]
    assert slots[0] == 1010.0  # aligned to the interval
    assert all((s - 1010.0) % 10 == 0 for s in slots)  # never off the grid
    assert len(set(slots)) == 20  # never doubled
    lates = {r["slot_ts"]: r["late_s"] for r in w.records if r["late_s"]}
    assert lates == {1060.0: 2.5, 1130.0: 5.0}
    assert agent.stats.skipped_slots == 3 and agent.stats.late_ticks == 2
    assert slots[-1] == 1010.0 + 10 * (20 + 3 - 1)  # 20 samples + 3 skipped slots


def test_record_shape_with_nulls_and_reasons(tmp_path: Path) -> None:
    clock = FakeClock(1_700_000_000.0)
    agent, w = make_agent(tmp_path, clock, role="head")
    rec = agent.tick()
    assert rec is not None
    for key in ("node", "ts", "ts_iso", "seq", "late_s", "gpus", "zones", "errors"):
        assert key in rec
    assert rec["ts_iso"] == "2023-11-14T22:13:20.000Z"
    g = rec["gpus"][0]
    assert g["temp_c"] == 55.0 and g["memory_used_mib"] is None and g["fan_pct"] is None
    assert g["null_reasons"]["memory_used_mib"] == "NVML_ERROR_NOT_SUPPORTED"
    assert "temp_c" not in g["null_reasons"]
    z = rec["zones"][0]
    assert z == {
        "name": "thermal_zone0",
        "type": "acpitz",
        "temp_c": 45.0,
        "trips": [
            {"type": "critical", "temp_c": 104.8},
            {"type": "hot", "temp_c": 100.0},
            {"type": "passive", "temp_c": 95.0},
        ],
    }
    assert rec["errors"] == []


def test_broken_gpu_does_not_stop_zone_logging(tmp_path: Path) -> None:
    clock = FakeClock(1000.0)
    agent, w = make_agent(tmp_path, clock, gpu=FakeGpuSampler(error=RuntimeError("GPU is lost")))
    rec = agent.tick()
    assert rec["gpus"] == [] and len(rec["zones"]) == 7
    assert rec["errors"] == [{"source": "gpu", "error": "RuntimeError: GPU is lost"}]


def test_dropped_records_are_counted(tmp_path: Path) -> None:
    clock = FakeClock(1000.0)
    agent, _ = make_agent(tmp_path, clock, writer=ListWriter(fail=True))
    agent.tick()
    assert agent.stats.dropped == 1 and agent.stats.samples == 1


def test_alerts_edge_triggered(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock(1000.0)
    gpu = FakeGpuSampler()
    agent, w = make_agent(tmp_path, clock, gpu=gpu, alerts=AlertPolicy(zone_margin_c=10.0))
    agent.tick()
    assert w.records[-1]["events"] == []
    set_zone_temps(tmp_path / "sys", {1: 99_000})  # 5.8 C below critical
    gpu.samples = [gb10_sample(temp_c=88, reasons=("sw_thermal_slowdown", "sw_power_cap"))]
    clock.now += 10
    agent.tick()
    evs = {e["event"]: e for e in w.records[-1]["events"]}
    assert evs["zone_near_critical"]["state"] == "raised"
    assert evs["zone_near_critical"]["margin_c"] == pytest.approx(5.8)
    assert evs["gpu_thermal_clock_event"]["reasons"] == ["sw_thermal_slowdown"]
    clock.now += 10
    agent.tick()
    assert w.records[-1]["events"] == []  # still active: no repeat
    set_zone_temps(tmp_path / "sys", {1: 70_000})
    gpu.samples = [gb10_sample()]
    clock.now += 10
    agent.tick()
    assert {(e["event"], e["state"]) for e in w.records[-1]["events"]} == {
        ("zone_near_critical", "cleared"),
        ("gpu_thermal_clock_event", "cleared"),
    }
    assert any("zone_near_critical raised" in m for m in caplog.messages)


def test_metrics_exposition_over_loopback(tmp_path: Path) -> None:
    clock = FakeClock(1000.0)
    gpu = FakeGpuSampler([gb10_sample(reasons=("sw_thermal_slowdown", "gpu_idle"))])
    agent, _ = make_agent(tmp_path, clock, gpu=gpu)
    agent.tick()
    clock.now = 1013.0
    agent.tick()
    server = MetricsServer(ThermalCollector(agent, clock), "127.0.0.1", 0)
    port = server.start()
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    finally:
        server.stop()
    assert 'node_thermal_zone_temp{type="cpu-p-core",zone="1"} 68.0' in text
    assert (
        'DCGM_FI_DEV_GPU_TEMP{Hostname="node1",UUID="GPU-fake-0000",gpu="0",modelName="NVIDIA GB10"} 55.0'
        in text
    )
    assert "DCGM_FI_DEV_POWER_USAGE{" in text and "DCGM_FI_DEV_SM_CLOCK{" in text
    assert "DCGM_FI_DEV_GPU_UTIL{" in text
    assert (
        'DCGM_FI_DEV_CLOCKS_EVENT_REASONS{Hostname="node1",UUID="GPU-fake-0000",gpu="0",modelName="NVIDIA GB10"} 33.0'
        in text
    )
    assert "DCGM_FI_DEV_SHUTDOWN_TEMP{" not in text  # NOT_SUPPORTED: absent, not zero
    assert 'node_hwmon_temp_celsius{chip="hwmon1",sensor="temp1"} 41.0' in text
    assert "servectl_thermal_samples_total 2.0" in text
    assert "servectl_thermal_late_ticks_total 1.0" in text
    assert "servectl_thermal_dropped_records_total 0.0" in text


def test_stale_sample_is_not_served(tmp_path: Path) -> None:
    clock = FakeClock(1000.0)
    agent, _ = make_agent(tmp_path, clock)
    agent.tick()
    clock.now = 1100.0  # 10 intervals without a sample
    names = {m.name for m in ThermalCollector(agent, clock).collect()}
    assert "node_thermal_zone_temp" not in names and "DCGM_FI_DEV_GPU_TEMP" not in names
    assert "servectl_thermal_samples" in names
