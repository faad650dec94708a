"""Field report over records from 4 nodes written by the real agent and writer (fake clock,
fake sysfs tree, fake GPU): peaks, head vs workers, gaps, throttle, nulls, CSV, PNG, CLI."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest
from tpwarden.cluster.cli.thermal import app
from tpwarden.cluster.reports.thermal.export import (
    report_from_dir,
    write_csv,
    write_json,
    write_plot,
)
from tpwarden.cluster.reports.thermal.fakes import (
    FakeGpuSampler,
    build_fake_sysfs,
    gb10_sample,
    set_zone_temps,
)
from tpwarden.cluster.reports.thermal.report import build_report, find_gaps, report_to_json
from tpwarden.node.thermal.agent import ThermalAgent
from tpwarden.node.thermal.writer import DurableWriter
from tpwarden.node.thermal.zones import SysfsZoneReader
from typer.testing import CliRunner

T0 = 1_700_000_000.0  # on a 10 s boundary
N = 270  # 45 minutes at 10 s
HOLE = range(100, 130)  # node3 is down for these slots (5 minutes)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


def _write_node(tmp: Path, node: str, head: bool) -> dict[str, Any]:
    """Run one node's agent over the window; returns the true maxima it was fed."""
    root = build_fake_sysfs(tmp / "sys" / node)
    gpu = FakeGpuSampler()
    clock = Clock()
    writer = DurableWriter(tmp / "logs", node)
    agent = ThermalAgent(node, 10.0, gpu, SysfsZoneReader(root), writer, clock, lambda s: None)
    agent.anchor(T0)
    idx = int(node[-1])
    truth: dict[str, Any] = {"gpu": [], "pcore": []}
    for k in range(N):
        clock.now = T0 + 10 * k + (0.2 if k % 7 else 0.0)
        if node == "node3" and k in HOLE:
            continue
        if node == "node4" and k >= N - 12:  # node4 stopped 2 minutes early
            break
        load = min(k, 200) / 200
        gpu_c = round(45 + 18 * load + idx * 0.5 + (1.0 if k == 180 else 0.0), 1)
        pcore_mc = int(50_000 + (32_000 if head else 20_000 + idx * 1000) * load)
        reasons: tuple[str, ...] = (
            ("sw_thermal_slowdown",)
            if node == "node2" and (150 <= k < 156 or 200 <= k < 203)
            else ()
        )
        gpu.samples = [gb10_sample(temp_c=gpu_c, reasons=reasons)]
        set_zone_temps(root, {1: pcore_mc, 3: 60_000 + idx * 1000})
        agent.tick()
        truth["gpu"].append(gpu_c)
        truth["pcore"].append(pcore_mc / 1000)
    writer.close()
    return {"gpu": max(truth["gpu"]), "pcore": max(truth["pcore"])}


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, dict[str, Any]]]:
    tmp = tmp_path_factory.mktemp("thermal")
    truth = {
        n: _write_node(tmp, n, head=(n == "node1")) for n in ("node1", "node2", "node3", "node4")
    }
    return tmp / "logs", truth


ROLES = {"node1": "head", "node2": "worker", "node3": "worker", "node4": "worker"}


def test_peaks_equal_the_highest_inputs_and_head_is_hotter(logs: Any) -> None:
    logdir, truth = logs
    rep, _, stats = report_from_dir(logdir, roles=ROLES)
    assert stats.bad_lines == 0
    by = {n.node: n for n in rep.nodes}
    for node, t in truth.items():
        assert by[node].gpu_peak_c == t["gpu"]
        assert by[node].zone_type_peaks["cpu-p-core"] == t["pcore"]
        assert by[node].zone_type_peaks["acpitz"] == 45.0
        z1 = next(z for z in by[node].zones if z.zone == "thermal_zone1")
        assert z1.critical_c == 104.8 and z1.margin_c == pytest.approx(104.8 - t["pcore"])
        assert by[node].min_margin_c == pytest.approx(104.8 - t["pcore"])
    assert by["node1"].zone_type_peaks["cpu-p-core"] == 82.0  # the field report's head peak
    hv = rep.head_vs_workers["zone:cpu-p-core"]
    assert hv["head"] == 82.0 and hv["workers_max"] == 74.0 and hv["delta_c"] == 8.0
    assert by["node1"].hottest_zone.type == "cpu-p-core"


def test_gaps_with_time_ranges(logs: Any) -> None:
    logdir, _ = logs
    rep, _, _ = report_from_dir(logdir, roles=ROLES)
    by = {n.node: n for n in rep.nodes}
    assert rep.since == T0 and rep.until == pytest.approx(T0 + 10 * (N - 1) + 0.2)
    assert (
        by["node1"].gaps == () and by["node1"].samples_received == N == by["node1"].samples_expected
    )
    (gap,) = by["node3"].gaps
    assert gap.kind == "within" and gap.missing == len(HOLE)
    assert gap.start == pytest.approx(T0 + 10 * (HOLE.start - 1) + 0.2)
    assert gap.end == pytest.approx(T0 + 10 * HOLE.stop + 0.2)
    assert by["node3"].samples_received == N - len(HOLE)
    (tail,) = by["node4"].gaps
    assert tail.kind == "window_end" and tail.end == rep.until
    assert tail.start == pytest.approx(T0 + 10 * (N - 13) + 0.2)


def test_window_filter_and_missing_window_start() -> None:
    assert [(g.kind, g.start, g.end) for g in find_gaps([130.0, 140.0], 100.0, 140.0, 10.0)] == [
        ("window_start", 100.0, 130.0)
    ]
    assert find_gaps([], 0.0, 50.0, 10.0)[0].missing == 6


def test_since_until(logs: Any) -> None:
    logdir, _ = logs
    rep, recs, _ = report_from_dir(logdir, since=T0 + 1000, until=T0 + 1500, roles=ROLES)
    assert all(T0 + 1000 <= r["ts"] <= T0 + 1500 for r in recs)
    by = {n.node: n for n in rep.nodes}
    assert by["node1"].samples_expected == 51 and by["node1"].samples_received == 50
    (gap,) = by["node3"].gaps  # the hole covers the window start
    assert gap.kind == "window_start" and gap.start == T0 + 1000


def test_throttle_episodes(logs: Any) -> None:
    logdir, _ = logs
    rep, _, _ = report_from_dir(logdir, roles=ROLES)
    by = {n.node: n for n in rep.nodes}
    assert by["node2"].throttle.episodes == 2
    assert by["node2"].throttle.duration_s == pytest.approx(60 + 30)
    assert by["node2"].throttle_by_reason["sw_thermal_slowdown"].episodes == 2
    assert by["node1"].throttle.episodes == 0


def test_not_supported_values_are_null_with_reasons_in_json(logs: Any, tmp_path: Path) -> None:
    logdir, _ = logs
    rep, _, _ = report_from_dir(logdir, roles=ROLES)
    doc = json.loads(write_json(rep, tmp_path / "r.json").read_text())
    n1 = next(n for n in doc["nodes"] if n["node"] == "node1")
    assert n1["gpu_fields"]["memory_used_mib"] == {
        "max": None,
        "min": None,
        "null_reason": "NVML_ERROR_NOT_SUPPORTED",
    }
    assert n1["gpu_fields"]["fan_pct"]["null_reason"] == "NVML_ERROR_NOT_SUPPORTED"
    assert n1["gpu_fields"]["temp_c"]["null_reason"] is None
    assert n1["gpu_margin_c"] is None and "gpu_margin_c" in n1["null_reasons"]
    g = next(n for n in doc["nodes"] if n["node"] == "node3")["gaps"][0]
    assert g["start_iso"].endswith("Z") and g["duration_s"] > 0


def test_zone_whose_reads_all_failed_has_null_peak_and_reason() -> None:
    recs = [
        {"node": "n", "ts": 10.0 * i, "interval_s": 10.0, "gpus": [],
         "zones": [{"name": "thermal_zone0", "type": "soc", "temp_c": None, "trips": [],
                    "null_reasons": {"temp_c": "EIO: Input/output error"}}]}
        for i in range(3)
    ]  # fmt: skip
    (node,) = build_report(recs).nodes
    assert node.zones[0].peak_c is None and node.zones[0].null_reason == "EIO: Input/output error"
    assert (
        node.zone_type_peaks == {"soc": None}
        and node.null_reasons["gpu_peak_c"] == "no GPU samples"
    )
    assert report_to_json(build_report(recs))["nodes"][0]["hottest_zone"] is None


def test_csv_and_png_written(logs: Any, tmp_path: Path) -> None:
    logdir, truth = logs
    rep, recs, _ = report_from_dir(logdir, roles=ROLES)
    with open(write_csv(recs, tmp_path / "all.csv"), newline="") as f:
        rows = list(csv.DictReader(f))
    assert set(rows[0]) == {"node", "ts", "ts_iso", "sensor", "value", "null_reason"}
    gpu_n1 = [
        float(r["value"]) for r in rows if r["node"] == "node1" and r["sensor"] == "gpu0.temp_c"
    ]
    assert len(gpu_n1) == N and max(gpu_n1) == truth["node1"]["gpu"]
    mem = [r for r in rows if r["sensor"] == "gpu0.memory_used_mib"]
    assert mem and all(
        r["value"] == "" and r["null_reason"] == "NVML_ERROR_NOT_SUPPORTED" for r in mem
    )
    png = write_plot(rep, recs, tmp_path / "t.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_cli_report_table_json_csv_plot(logs: Any, tmp_path: Path) -> None:
    logdir, _ = logs
    runner = CliRunner()
    res = runner.invoke(app, ["report", "--from-dir", str(logdir), "--head", "node1",
                              "--csv", str(tmp_path / "a.csv"), "--plot", str(tmp_path / "a.png")])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "node3" in res.output and "gap" in res.output and "head vs workers" in res.output
    assert (tmp_path / "a.csv").exists() and (tmp_path / "a.png").exists()
    res = runner.invoke(
        app, ["report", "--from-dir", str(logdir), "--json", "--since", "2023-11-14T22:30:00Z"]
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["since_iso"] == "2023-11-14T22:30:00.000Z" and len(doc["nodes"]) == 4
