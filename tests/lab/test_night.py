"""A night on call compressed to minutes (issue 20): the thermal agents on all four nodes at the
lab's 1 s interval, the watchdog ticking at its scaled interval with the real actuator, a bench
sweep under the watchdog's eye, a heat fault that throttles node2's GPU, and a hang (the head's
API paused) that the watchdog restarts. Then `tpwarden report -i` reads what the night left
(the watchdog's event log, every node's thermal files over SFTP, the bench run) and every count
in its JSON is recomputed here independently, from the raw files with plain `json`."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from tpwarden.cluster.bench.plan import BenchOptions
from tpwarden.cluster.bench.runner import BenchRunner
from tpwarden.cluster.cli import app as tpwarden_app
from tpwarden.cluster.cli.thermal import app as thermal_app
from tpwarden.cluster.control.controller import Controller
from tpwarden.cluster.inventory.load import load_inventory
from tpwarden.lab import faults
from tpwarden.lab.client_image import CLIENT_LATEST
from tpwarden.lab.paths import HEAD
from tpwarden.watchdog.policy_state import WatchdogPhase
from typer.testing import CliRunner

from tests.lab.test_watchdog_scenarios import (
    make_watchdog,
    phase_is,
    restart_then_healthy,
    tick_until,
)

pytestmark = pytest.mark.lab
NODES = ("node1", "node2", "node3", "node4")
HOT = "node2"
# the clock-event reasons a thermal throttle shows as (NVML's SW/HW thermal slowdown); written
# out here, not imported, so the recount does not share the report's definitions
THERMAL = {"sw_thermal_slowdown", "hw_thermal_slowdown", "hw_slowdown"}


def _cli(app: Any, *args: str) -> Any:
    res = CliRunner().invoke(app, list(args))
    assert res.exit_code == 0, res.output
    return res


def _night_inventory(lab: Any, tmp_path: Path) -> Path:
    """The lab inventory with the watchdog's state dir in this test's directory, so the report
    reads this night's event log (and nobody else's) where the inventory says it is."""
    doc = yaml.safe_load(Path(lab.inventory).read_text())
    doc["all"]["vars"]["tpwarden"]["watchdog"]["state_dir"] = str(tmp_path / "wd")
    path = tmp_path / "night-inventory.yml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _raw_lines(path: Path) -> list[dict[str, Any]]:
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue  # a torn last line (the report skips it too)
    return out


def _thermal_raw(lab: Any, node: str, since: float, until: float) -> list[dict[str, Any]]:
    """The node's samples in the window, from its log directory on the host side of the mount."""
    recs: list[dict[str, Any]] = []
    for f in sorted(lab.paths.node(node).logfs.glob(f"thermal/thermal-{node}-*.jsonl")):
        recs += [r for r in _raw_lines(f) if since <= r.get("ts", -1) <= until]
    return sorted(recs, key=lambda r: r["ts"])


def _throttled(rec: dict[str, Any]) -> bool:
    return any(set(g.get("clock_event_reasons") or ()) & THERMAL for g in rec.get("gpus") or ())


def _episodes(recs: list[dict[str, Any]], interval_s: float) -> int:
    """Runs of throttled samples; a gap of more than 1.5 intervals ends a run."""
    count, prev_on, prev_ts = 0, False, None
    for r in recs:
        on = _throttled(r)
        joined = prev_on and prev_ts is not None and r["ts"] - prev_ts <= 1.5 * interval_s
        if on and not joined:
            count += 1
        prev_on, prev_ts = on, r["ts"]
    return count


def _gpu_peak(recs: list[dict[str, Any]]) -> float | None:
    temps = [g["temp_c"] for r in recs for g in r.get("gpus") or () if g.get("temp_c") is not None]
    return max(temps) if temps else None


def _hot_node_samples(lab: Any, since: float) -> list[dict[str, Any]]:
    return _thermal_raw(lab, HOT, since, time.time() + 60)


@pytest.mark.timeout(1200)
def test_compressed_night_report_counts_equal_the_raw_files(lab, tmp_path, monkeypatch):
    control, runs = tmp_path / "control", tmp_path / "runs"
    monkeypatch.setenv("TPWARDEN_STATE_DIR", str(control))  # restart job and report read it
    monkeypatch.setenv("TPWARDEN_RUNS_DIR", str(runs))  # where `report -i` finds bench runs
    inventory = _night_inventory(lab, tmp_path)
    spec = load_inventory(inventory)
    t0 = time.time()
    _cli(thermal_app, "start", "-i", str(inventory))
    try:
        with Controller(spec, state_dir=control, node_timeout_s=10) as ctl:
            result = ctl.up(timeout_s=300, replace=True)
            assert result.ok, (result.outcomes, result.boot and result.boot.reason)
            wd = make_watchdog(ctl.spec, tmp_path)
            assert wd.config.events_path == str(tmp_path / "wd" / "events.jsonl")
            try:
                tick_until(wd, phase_is(wd, WatchdogPhase.READY), 60, "ready")
                # 1. a bench sweep while the watchdog probes: busy, never a restart
                out: dict[str, Any] = {}
                runner = BenchRunner(ctl, runs)
                opts = BenchOptions(
                    kind="sweep", levels=(1, 4), output_len=48, num_prompts=4,
                    client_image=CLIENT_LATEST,
                )  # fmt: skip
                pre = runner.preflight()
                bench = threading.Thread(
                    target=lambda: out.update(run=runner.run(opts, pre)), daemon=True
                )
                bench.start()
                tick_until(wd, lambda: not bench.is_alive(), 480, "bench finished")
                assert out.get("run") is not None, "the bench run failed"
                # 2. heat: node2's GPU held at 97 C for 6 s throttles it, then it cools
                t_heat = time.time()
                faults.heat(lab.paths, HOT, gpu_temp_c=97, duration_s=6)
                tick_until(
                    wd, lambda: any(_throttled(r) for r in _hot_node_samples(lab, t_heat)), 60,
                    "node2 throttled",
                )  # fmt: skip
                tick_until(
                    wd, lambda: not _throttled(_hot_node_samples(lab, t_heat)[-1]), 120,
                    "node2 cooled below its slowdown temperatures",
                )  # fmt: skip
                # 3. a hang: the head's API paused; the watchdog restarts the server
                t_fault = time.time()
                faults.container_action(lab.paths, HEAD, "pause")
                restart_then_healthy(wd, tmp_path, t_fault)
                for _ in range(3):  # a few healthy probes after the restart
                    wd.tick()
                    time.sleep(wd.config.interval_s)
            finally:
                wd.close()
                with contextlib.suppress(Exception):
                    faults.container_action(lab.paths, HEAD, "unpause")
                faults.cool(lab.paths, HOT)
            t1 = time.time()
            ctl.down()
    finally:
        CliRunner().invoke(thermal_app, ["stop", "-i", str(inventory)])

    res = _cli(
        tpwarden_app, "report", "-i", str(inventory), "--since", f"{t0:.3f}",
        "--until", f"{t1:.3f}", "--json",
    )  # fmt: skip
    doc = json.loads(res.stdout)
    assert doc["ok"] and not doc["unread"], doc.get("unread")

    # -- the watchdog's part, recounted from events.jsonl ------------------------------------
    since, until = doc["since"], doc["until"]  # the window as the report parsed it
    assert since == pytest.approx(t0, abs=0.01) and until == pytest.approx(t1, abs=0.01)
    wd_log = tmp_path / "wd" / "events.jsonl"
    events = [e for e in _raw_lines(wd_log) if since <= e.get("ts", -1) <= until]
    probes = [e for e in events if e["kind"] == "probe"]
    wdoc = doc["watchdog"]
    assert wdoc["probes"] == len(probes) > 20
    assert wdoc["verdicts"] == dict(Counter(p.get("verdict") or "unknown" for p in probes))
    decisions = Counter(str(e.get("decision")) for e in events if e["kind"] == "decision")
    assert wdoc["decisions"] == dict(decisions)
    begins = [e for e in events if e["kind"] == "restart_begin"]
    ends = [e for e in events if e["kind"] == "restart_end"]
    assert len(begins) == len(ends) == 1 and ends[0]["ok"]
    (row,) = wdoc["restarts"]  # the operator's `up` is no restart; the watchdog's is
    assert row["by"] == "watchdog" and row["cause"] == begins[0]["cause"] == "probe_failures"
    assert row["ok"] is True and not row["false_candidate"]
    assert wdoc["false_restart_candidates"] == 0
    assert len(wdoc["alerts"]) == decisions.get("alert", 0)

    # -- the thermal part, recounted from every node's files ---------------------------------
    interval = float(spec.thermal.interval_s)
    nodes = {n["node"]: n for n in doc["thermal"]["nodes"]}
    assert set(nodes) == set(NODES)
    episodes_total = 0
    for name in NODES:
        raw = _thermal_raw(lab, name, since, until)
        n = nodes[name]
        assert n["samples_received"] == len(raw) > 0, name
        assert n["gpu_peak_c"] == _gpu_peak(raw), name
        episodes = _episodes(raw, interval)
        assert n["throttle"]["episodes"] == episodes, name
        episodes_total += episodes
    assert nodes[HOT]["throttle"]["episodes"] >= 1 and nodes[HOT]["gpu_peak_c"] >= 95
    assert all(nodes[n]["throttle"]["episodes"] == 0 for n in NODES if n != HOT)
    assert doc["throttle_episodes"] == episodes_total

    # -- the bench part, from the run directory --------------------------------------------
    run_dir = out["run"].dir
    manifest = json.loads((run_dir / "manifest.json").read_text())
    table = json.loads((run_dir / "table.json").read_text())
    (bench,) = doc["bench"]
    assert bench["run_id"] == manifest["run_id"]
    assert [r["level"] for r in bench["rows"]] == [r["level"] for r in table["rows"]] == [1, 4]
    for got, raw_row in zip(bench["rows"], table["rows"], strict=True):
        assert got["aggregate_tok_s"] == raw_row["aggregate_tok_s"] > 0
