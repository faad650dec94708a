"""Thermal agent: wall-clock grid with a fake clock, record shape, alerts, /metrics."""

from __future__ import annotations

import dataclasses
import json
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from tpwarden.cluster.reports.thermal.fakes import (
    FakeGpuSampler,
    build_fake_sysfs,
    gb10_sample,
    set_zone_temps,
)
from tpwarden.cluster.reports.thermal.remote import status_row
from tpwarden.cluster.reports.thermal.report import build_report
from tpwarden.node.gpu import NvmlStatus, Reading
from tpwarden.node.gpu_access import DeviceDenial
from tpwarden.node.thermal.agent import ThermalAgent
from tpwarden.node.thermal.alerts import AlertPolicy
from tpwarden.node.thermal.metrics import MetricsServer, ThermalCollector
from tpwarden.node.thermal.zones import SysfsZoneReader


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


class CountsNoGpu(FakeGpuSampler):
    """NVML as it answers under a unit whose DeviceAllow misses /dev/nvidia0: initialised, no
    GPU counted (nvidia-smi: "No devices found")."""

    def __init__(self) -> None:
        super().__init__(samples=[])

    def status(self) -> NvmlStatus:
        return NvmlStatus(state="ok", driver_version="580.95.05", device_count=0)


DENIAL = DeviceDenial(
    path="/dev/nvidia0", errno_name="EPERM", unit="tpwarden-thermal.service",
    registered_as=("nvidia", "nvidia-modeset", "nvidiactl"),
)  # fmt: skip


def test_a_denied_gpu_device_is_recorded_as_such_with_cause_and_unit(tmp_path: Path) -> None:
    # issue 52 item 1: never "no GPU" when the unit's device policy refuses /dev/nvidia0
    clock = FakeClock(1000.0)
    agent, w = make_agent(tmp_path, clock, gpu=CountsNoGpu(), gpu_access=lambda: DENIAL)
    rec = agent.tick()
    (err,) = rec["errors"]
    assert err["cause"] == "device_cgroup" and err["unit"] == "tpwarden-thermal.service"
    assert "/dev/nvidia0: EPERM" in err["error"] and "not 'no GPU'" in err["error"]
    assert len(rec["zones"]) == 7  # the zones still log
    # the thermal report's gap reason and `thermal status` read the same error
    records = []
    for _ in range(3):
        clock.now += 10
        records.append(agent.tick())
    (node,) = build_report(records).nodes
    assert node.gpu_peak_c is None and "EPERM" in node.null_reasons["gpu_peak_c"]
    assert "tpwarden-thermal.service" in node.null_reasons["gpu_peak_c"]
    row = status_row("node1", {}, {"now": clock.now, "latest": records[-1]}, 1)
    assert any("device permission denied" in e for e in row.errors_in_latest)


def test_no_gpu_and_no_denial_is_said_plainly(tmp_path: Path) -> None:
    clock = FakeClock(1000.0)
    agent, _ = make_agent(tmp_path, clock, gpu=CountsNoGpu(), gpu_access=lambda: None)
    assert agent.tick()["errors"] == [
        {"source": "gpu", "error": "NVML answers but counts no GPU (0 devices)"}
    ]
    # a GPU whose every reading was refused for permissions asks the same question
    refused = gb10_sample()
    refused = dataclasses.replace(
        refused, temp_c=Reading(None, "nvmlDeviceGetTemperatureV: insufficient permissions")
    )
    agent, _ = make_agent(tmp_path, clock, gpu=FakeGpuSampler([refused]), gpu_access=lambda: DENIAL)
    clock.now += 10
    assert agent.tick()["errors"][0]["cause"] == "device_cgroup"
    agent, _ = make_agent(tmp_path, clock, gpu=FakeGpuSampler(), gpu_access=lambda: DENIAL)
    clock.now += 10
    assert agent.tick()["errors"] == []  # GPUs answered: nothing asked, nothing recorded


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


class FakeVirtualMemory:
    """psutil.virtual_memory()'s shape, with GB10-like numbers (128 GB unified)."""

    total = 128 * 10**9
    available = 30 * 10**9


def test_metrics_exposition_over_loopback(tmp_path: Path) -> None:
    from tpwarden.node.memory import memory_reader

    clock = FakeClock(1000.0)
    gpu = FakeGpuSampler([gb10_sample(reasons=("sw_thermal_slowdown", "gpu_idle"))])
    agent, _ = make_agent(
        tmp_path, clock, gpu=gpu, alerts=AlertPolicy(zone_margin_c=7.5),
        memory=memory_reader(FakeVirtualMemory),
    )  # fmt: skip
    agent.tick()
    clock.now = 1013.0
    agent.tick()
    collector = ThermalCollector(agent, clock, zone_roles={"1": "P-cores"})
    server = MetricsServer(collector, "127.0.0.1", 0)
    port = server.start()
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    finally:
        server.stop()
    gpu0 = 'gpu="0",model="NVIDIA GB10",node="node1",uuid="GPU-fake-0000"'
    gpu0_r = 'gpu="0",model="NVIDIA GB10",node="node1",reason="%s",uuid="GPU-fake-0000"'
    zone1 = 'node="node1",role="P-cores",type="cpu-p-core",zone="1"'
    for line in (
        f"tpwarden_thermal_zone_temperature_celsius{{{zone1}}} 68.0",
        'tpwarden_thermal_zone_temperature_celsius{node="node1",role="",type="acpitz",zone="0"} 45.0',
        f"tpwarden_thermal_zone_critical_margin_celsius{{{zone1}}} 36.8",
        'tpwarden_thermal_zone_trip_celsius{node="node1",role="",trip="0",trip_type="critical",'
        'type="acpitz",zone="0"} 104.8',
        f"tpwarden_gpu_temperature_celsius{{{gpu0}}} 55.0",
        f"tpwarden_gpu_sm_clock_hertz{{{gpu0}}} 2e+09",
        f"tpwarden_gpu_sm_clock_max_hertz{{{gpu0}}} 3.003e+09",
        f"tpwarden_gpu_clock_limit_hertz{{{gpu0}}} 2e+09",
        f"tpwarden_gpu_power_watts{{{gpu0}}} 30.0",
        f"tpwarden_gpu_utilization_ratio{{{gpu0}}} 0.8",
        f"tpwarden_gpu_clock_event_reasons{{{gpu0}}} 33.0",
        f"tpwarden_gpu_throttle_active{{{gpu0_r % 'sw_thermal_slowdown'}}} 1.0",
        f"tpwarden_gpu_throttle_active{{{gpu0_r % 'hw_slowdown'}}} 0.0",
        f"tpwarden_gpu_thermal_throttle_active{{{gpu0}}} 1.0",
        f"tpwarden_gpu_memory_unified{{{gpu0}}} 1.0",
        'tpwarden_node_memory_total_bytes{node="node1"} 1.28e+11',
        'tpwarden_node_memory_used_bytes{node="node1"} 9.8e+10',
        'tpwarden_node_memory_available_bytes{node="node1"} 3e+10',
        'tpwarden_hwmon_temperature_celsius{chip="hwmon1",chip_name="nvme",label="Composite",'
        'node="node1",sensor="temp1"} 41.0',
        'tpwarden_thermal_samples_total{node="node1"} 2.0',
        'tpwarden_thermal_late_ticks_total{node="node1"} 1.0',
        'tpwarden_thermal_dropped_records_total{node="node1"} 0.0',
        'tpwarden_thermal_alert_margin_celsius{node="node1"} 7.5',
        'tpwarden_thermal_last_sample_timestamp_seconds{node="node1"} 1013.0',
    ):
        assert line in text.splitlines(), line
    # NOT_SUPPORTED on GB10: absent, not zero
    for absent in ("tpwarden_gpu_shutdown_temperature_celsius{", "tpwarden_gpu_memory_used_bytes{"):
        assert absent not in text
    assert "node_thermal" not in text and "DCGM_" not in text and "node_hwmon" not in text


def test_discrete_gpu_memory_is_served_and_not_unified() -> None:
    from tpwarden.node.thermal.metrics_gpu import gpu_metrics

    gpu = {"index": 1, "uuid": "GPU-x", "name": "H200", "memory_used_mib": 1024.0,
           "memory_total_mib": 2048.0, "clock_event_reasons": None, "null_reasons": {}}  # fmt: skip
    fams = {m.name: m for m in gpu_metrics({"gpus": [gpu]}, "n9")}
    assert [s.value for s in fams["tpwarden_gpu_memory_used_bytes"].samples] == [2**30]
    assert [s.value for s in fams["tpwarden_gpu_memory_unified"].samples] == [0.0]
    # unknown clock-event reasons are not "none active"
    assert fams["tpwarden_gpu_thermal_throttle_active"].samples == []
    assert fams["tpwarden_gpu_throttle_active"].samples == []


def test_stale_sample_is_not_served(tmp_path: Path) -> None:
    clock = FakeClock(1000.0)
    agent, _ = make_agent(tmp_path, clock)
    agent.tick()
    clock.now = 1100.0  # 10 intervals without a sample
    names = {m.name for m in ThermalCollector(agent, clock).collect()}
    assert "tpwarden_thermal_zone_temperature_celsius" not in names
    assert "tpwarden_gpu_temperature_celsius" not in names
    assert "tpwarden_node_memory_used_bytes" not in names
    assert "tpwarden_thermal_samples" in names  # agent health is always served
    assert "tpwarden_thermal_last_sample_timestamp_seconds" in names
