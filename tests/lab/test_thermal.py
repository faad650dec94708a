"""Thermal agents on the 4 lab nodes at the lab's 1 s interval, started and read the way an
operator does it (`tpwarden thermal start|status|report -i`): load raises the temperatures, the
report's peaks are the files' peaks, NOT_SUPPORTED readings are nulls with reasons, a node cut
off shows as a gap and loses nothing, kill -9 loses at most the in-flight sample, and a full
log filesystem does not stop the agent."""

from __future__ import annotations

import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from tpwarden.cluster.cli.thermal import app
from tpwarden.cluster.control.controller import Controller
from tpwarden.cluster.inventory.load import load_inventory
from tpwarden.cluster.reports.thermal.remote import TRANSIENT_UNIT, parse_units, units_argv
from tpwarden.lab import faults
from tpwarden.node.thermal.writer import read_records
from typer.testing import CliRunner

from tests.lab.waiting import poll

pytestmark = pytest.mark.lab
NODES = ("node1", "node2", "node3", "node4")


def cli(*args: str, ok: bool = True) -> Any:
    res = CliRunner().invoke(app, list(args))
    if ok:
        assert res.exit_code == 0, res.output
    return res


def report_json(lab: Any, tmp: Path, *extra: str, ok: bool = True) -> tuple[dict, Path]:
    keep = tmp / f"pulled-{time.monotonic_ns()}"
    res = cli("report", "-i", str(lab.inventory), "--json", "--keep", str(keep), *extra, ok=ok)
    return json.loads(res.stdout), keep


def unit(lab: Any, node: str) -> dict[str, Any]:
    facts = parse_units(lab.ssh(node, units_argv()).stdout)[TRANSIENT_UNIT]
    running = facts.active_state == "active" and facts.sub_state == "running"
    return {"running": running, "pid": facts.main_pid, "restarts": facts.restarts}


def node_records(lab: Any, node: str) -> tuple[list[dict], Any]:
    """Every record on the node, read from its log dir on the host side of the bind mount."""
    files = sorted(lab.paths.node(node).logfs.glob(f"thermal/thermal-{node}-*.jsonl"))
    return read_records(files)


@pytest.fixture(scope="module")
def agents(lab: Any) -> Any:
    cli("start", "-i", str(lab.inventory))
    poll(lambda: cli("status", "-i", str(lab.inventory), ok=False).exit_code == 0, 20,
         "all agents running with a fresh sample")  # fmt: skip
    yield lab
    cli("stop", "-i", str(lab.inventory), ok=False)


def _load(spec: Any, seconds: float, streams: int = 12) -> int:
    key = os.environ.get("TPWARDEN_API_KEY", "lab-key")
    url = f"{spec.api_base}/v1/completions"
    body = {"model": spec.serving.model.served_name, "prompt": "heat " * 64, "max_tokens": 256}
    end = time.monotonic() + seconds

    def stream(_: int) -> int:
        done = 0
        with httpx.Client(timeout=30, headers={"Authorization": f"Bearer {key}"}) as c:
            while time.monotonic() < end:
                done += c.post(url, json=body).status_code == 200
        return done

    with ThreadPoolExecutor(streams) as ex:
        return sum(ex.map(stream, range(streams)))


def test_load_heats_head_hottest_and_peaks_equal_the_files(agents, tmp_path, monkeypatch):
    lab = agents
    monkeypatch.setenv("TPWARDEN_API_KEY", os.environ.get("TPWARDEN_API_KEY", "lab-key"))
    spec = load_inventory(lab.inventory)
    t0 = time.time()
    with Controller(spec, state_dir=tmp_path, node_timeout_s=5) as ctl:
        assert ctl.up(timeout_s=180).ok
        try:
            assert _load(spec, 25) > 0
        finally:
            ctl.down()
    doc, pulled = report_json(lab, tmp_path, "--since", f"{t0:.3f}")
    records, stats = read_records(sorted(pulled.glob("*.jsonl")))
    records = [r for r in records if r["ts"] >= t0]
    nodes = {n["node"]: n for n in doc["nodes"]}
    assert set(nodes) == set(NODES) and not doc["unreachable"]
    for name, n in nodes.items():
        mine = [r for r in records if r["node"] == name]
        gpu = [g["temp_c"] for r in mine for g in r["gpus"] if g["temp_c"] is not None]
        zone = [z["temp_c"] for r in mine for z in r["zones"] if z["temp_c"] is not None]
        assert n["gpu_peak_c"] == max(gpu) and n["hottest_zone"]["peak_c"] == max(zone)
        assert max(gpu) > gpu[0] + 2, f"{name}: load did not heat the GPU ({gpu[0]} -> {max(gpu)})"
        assert n["role"] == ("head" if name == "node1" else "worker")
    workers = [nodes[w]["hottest_zone"]["peak_c"] for w in NODES[1:]]
    assert nodes["node1"]["hottest_zone"]["peak_c"] > max(workers)
    assert doc["head_vs_workers"]["hottest_zone_c"]["delta_c"] > 0
    # GB10: memory info answers NOT_SUPPORTED and fans are invisible: nulls with reasons
    g = records[-1]["gpus"][0]
    assert g["memory_used_mib"] is None and g["null_reasons"]["memory_used_mib"]
    assert g["fan_pct"] is None and g["null_reasons"]["fan_pct"]
    for n in nodes.values():
        assert n["gpu_fields"]["memory_used_mib"]["null_reason"]
        assert n["gpu_fields"]["fan_pct"]["null_reason"]


def _gpu_at(records: list[dict], node: str, since: float, until: float) -> list[float]:
    return [g["temp_c"] for r in records if r["node"] == node and since <= r["ts"] <= until
            for g in r["gpus"] if g["temp_c"] is not None]  # fmt: skip


def test_a_paused_rank_cools_while_the_others_wait_warm(agents, tmp_path, monkeypatch):
    """Issue 52: each rank heats with its own load. Under load, node3's rank is paused: the
    server hangs with its requests running, the other ranks stay busy (on GPUs they spin in the
    collective), the frozen one cools; after `down` every rank cools."""
    lab = agents
    monkeypatch.setenv("TPWARDEN_API_KEY", os.environ.get("TPWARDEN_API_KEY", "lab-key"))
    spec = load_inventory(lab.inventory)
    with Controller(spec, state_dir=tmp_path, node_timeout_s=5) as ctl:
        assert ctl.up(timeout_s=180).ok
        try:
            with ThreadPoolExecutor(1) as pool:
                pool.submit(_load, spec, 70, 8)
                time.sleep(30)  # heat under load (the GPU follows within a minute)
                paused_at = time.time()
                faults.container_action(lab.paths, "node3", "pause")
                time.sleep(30)  # the hang: requests stay running on the other ranks
                hung_until = time.time()
                faults.container_action(lab.paths, "node3", "unpause")
        finally:
            ctl.down()
    doc, pulled = report_json(lab, tmp_path, "--since", f"{paused_at - 10:.3f}")
    records, _ = read_records(sorted(pulled.glob("*.jsonl")))
    end = (hung_until - 8, hung_until)
    frozen = _gpu_at(records, "node3", *end)
    assert frozen and max(frozen) < max(_gpu_at(records, "node3", paused_at - 3, paused_at)) - 3
    for node in ("node1", "node2", "node4"):
        assert min(_gpu_at(records, node, *end)) >= max(frozen) + 5, node


def test_cut_node_is_a_gap_and_loses_nothing(agents, tmp_path):
    lab = agents
    since = time.time()
    poll(lambda: time.time() > since + 3, 5, "a few samples before the cut")
    faults.cut(lab.paths, "node3")
    try:
        cut_at = time.time()
        poll(lambda: time.time() > cut_at + 6, 8, "node3 cut off for a while")
        doc, _ = report_json(lab, tmp_path, "--since", f"{since:.3f}", ok=False)
        until = time.time()
    finally:
        faults.restore(lab.paths, "node3")
    assert "node3" in doc["unreachable"]
    nodes = {n["node"]: n for n in doc["nodes"]}
    gap = nodes["node3"]["gaps"]
    assert (
        gap and gap[0]["kind"] == "no_samples" and gap[0]["start"] == pytest.approx(since, abs=0.01)
    )
    assert gap[0]["start_iso"] and gap[0]["end_iso"] and gap[0]["duration_s"] >= 6
    for name in ("node1", "node2", "node4"):
        n = nodes[name]
        assert not n["gaps"], (name, n["gaps"])
        assert n["samples_received"] >= n["samples_expected"] - 1
    # back: node3's agent kept writing locally the whole time
    poll(lambda: cli("status", "-i", str(lab.inventory), ok=False).exit_code == 0, 20,
         "node3 reachable again")  # fmt: skip
    doc, _ = report_json(lab, tmp_path, "--since", f"{since:.3f}", "--until", f"{until:.3f}")
    n3 = next(n for n in doc["nodes"] if n["node"] == "node3")
    assert not n3["gaps"] and n3["samples_received"] >= n3["samples_expected"] - 1


def test_kill_9_loses_at_most_the_sample_in_flight(agents):
    lab = agents
    before = unit(lab, "node2")
    assert before["running"] and before["pid"]
    recs, _ = node_records(lab, "node2")
    run_start = max(i for i, r in enumerate(recs) if r["seq"] == 1)  # this process's first record
    lab.ssh("node2", ["kill", "-9", str(before["pid"])])
    killed_at = time.time()
    after = poll(lambda: (u := unit(lab, "node2"))["running"] and u["pid"] != before["pid"] and u,
                 15, "systemd to restart the agent")  # fmt: skip
    assert after["restarts"] > before["restarts"]
    poll(lambda: node_records(lab, "node2")[0][-1]["ts"] > killed_at, 15, "new samples")
    recs, stats = node_records(lab, "node2")
    old = [r for r in recs[run_start:] if r["ts"] < killed_at]
    seqs = [r["seq"] for r in old]
    assert seqs == list(range(1, len(seqs) + 1))  # everything the killed process wrote is there
    assert stats.bad_lines <= 1  # at most the record it was writing
    assert any(r["seq"] == 1 and r["ts"] > killed_at for r in recs)  # the restarted agent


def test_full_log_filesystem_does_not_stop_the_agent(agents):
    lab = agents
    before = unit(lab, "node4")
    fill_start = time.time()
    faults.fill_logs(lab.paths, "node4")
    try:
        full_at = time.time()
        poll(lambda: time.time() > full_at + 3, 5, "a few ticks on a full disk")
        assert unit(lab, "node4") == before  # same process, no restart
    finally:
        faults.free_logs(lab.paths, "node4")
    rec = poll(
        lambda: next((r for r in node_records(lab, "node4")[0] if r.get("dropped_records")), None),
        10, "writing to resume with the drop noted",
    )  # fmt: skip
    # The first record lost is the first tick after the disk filled: up to one interval (1 s in
    # the lab inventory) after `full_at`, plus the write itself.
    assert rec["dropped_records"] >= 2 and fill_start - 1 <= rec["dropped_since"] <= full_at + 2
    res = cli("status", "-i", str(lab.inventory), "--json", ok=False)
    row = next(n for n in json.loads(res.stdout)["nodes"] if n["node"] == "node4")
    assert row["running"] and row["dropped_today"] >= rec["dropped_records"]
