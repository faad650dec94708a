"""A night compressed to minutes, written by the real writers, and the morning report over it.

The watchdog's events come from the real Watchdog (tick() with a fake prober and actuator and
an injected clock: busy stretch, a hang, a restart, recovery); the thermal samples from the real
agent and DurableWriter over a fake sysfs with seven `acpitz` zones (a heat fault with thermal
throttling on node2, node3's agent down for a while); a bench run directory from cluster.bench's
writer. Every count in the report is then recomputed here from the raw files, independently.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from tpwarden.cluster.cli import app
from tpwarden.cluster.reports.morning_io import Sources, morning_from_files
from tpwarden.cluster.reports.thermal.fakes import (
    FakeGpuSampler,
    build_fake_sysfs,
)
from tpwarden.cluster.reports.thermal.localtime import parse_window
from tpwarden.cluster.reports.thermal.plot import THROTTLE_GID, thermal_figure
from tpwarden.node.thermal.agent import ThermalAgent
from tpwarden.node.thermal.records import THERMAL_REASONS
from tpwarden.node.thermal.writer import DurableWriter
from tpwarden.node.thermal.zones import SysfsZoneReader
from typer.testing import CliRunner

from tests.unit.night_builder import (
    DOWN,
    KST,
    NODES,
    ROLES,
    SAMPLES,
    T0,
    ZONES,
    Clock,
    build_night,
)


@pytest.fixture(scope="module")
def night(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return build_night(tmp_path_factory.mktemp("night"))


def _raw_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def _raw_samples(d: Path) -> dict[str, list[dict[str, Any]]]:
    by: dict[str, list[dict[str, Any]]] = {}
    for f in sorted((d / "thermal").glob("thermal-*.jsonl")):
        for r in _raw_lines(f):
            by.setdefault(r["node"], []).append(r)
    return {n: sorted(rs, key=lambda r: r["ts"]) for n, rs in by.items()}


def _raw_episodes(rs: list[dict[str, Any]]) -> int:
    """Independent count: a new episode starts at a throttled sample whose predecessor was not
    throttled or lies more than 15 s back."""
    n, prev_on, prev_ts = 0, False, None
    for r in rs:
        on = any(set(g.get("clock_event_reasons") or []) & THERMAL_REASONS for g in r["gpus"])
        if on and not (prev_on and prev_ts is not None and r["ts"] - prev_ts <= 15):
            n += 1
        prev_on, prev_ts = on, r["ts"]
    return n


def _report(night: dict[str, Any]):
    src = Sources.from_dir(night["dir"])
    until = T0 + 10 * SAMPLES
    return morning_from_files(src, since=T0, until=until, zone_roles=ROLES)


def test_counts_equal_the_raw_files(night: dict[str, Any]) -> None:
    rep, _ = _report(night)
    events = _raw_lines(night["dir"] / "events.jsonl")
    probes = [e for e in events if e["kind"] == "probe"]
    wd = rep.watchdog
    assert wd.probes == len(probes) == 40
    for verdict in {p["verdict"] for p in probes}:
        assert wd.verdicts[verdict] == sum(1 for p in probes if p["verdict"] == verdict)
    assert wd.verdicts.get("busy", 0) >= 1 and wd.verdicts.get("stalled", 0) >= 1
    decisions = [e["decision"] for e in events if e["kind"] == "decision"]
    assert wd.decisions == {d: decisions.count(d) for d in set(decisions)}
    begins = [e for e in events if e["kind"] == "restart_begin"]
    by_watchdog = [r for r in wd.restarts if r.by == "watchdog"]
    assert len(by_watchdog) == len(begins) == night["restarts"] == 1
    assert [(r.by, r.cause) for r in wd.restarts if r.by != "watchdog"] == [
        ("kim@laptop", "operator")
    ]
    r = by_watchdog[0]
    assert r.cause == begins[0]["cause"] == "probe_failures" and r.ok is True
    assert r.back_after_s is not None and r.back_after_s > 0
    assert wd.false_restart_candidates == 0  # the hang was flat: a true restart
    answering = sum(1 for p in probes if p["verdict"] in ("ok", "busy"))
    assert wd.answering_pct == pytest.approx(100 * answering / len(probes), abs=0.01)

    raw = _raw_samples(night["dir"])
    by = {n.node: n for n in rep.thermal.nodes}
    for node, rs in raw.items():
        n = by[node]
        assert n.samples_received == len(rs)
        assert n.gpu_peak_c == max(g["temp_c"] for r in rs for g in r["gpus"])
        assert n.throttle.episodes == _raw_episodes(rs)
        for index, role in ROLES.items():
            peak = max(z["temp_c"] for r in rs for z in r["zones"]
                       if z["name"] == f"thermal_zone{index}")  # fmt: skip
            assert n.role_peaks[role]["peak_c"] == peak
            assert n.role_peaks[role]["margin_c"] == pytest.approx(104.8 - peak)
    assert by["node2"].throttle.episodes == 2 and rep.throttle_episodes == 2
    assert by["node1"].role_peaks["P-cores"]["peak_c"] == 82.0  # the field report's head peak
    assert [g.kind for g in by["node3"].gaps] == ["within"]
    assert len(by["node3"].gaps) == 1 and by["node3"].gaps[0].missing == len(DOWN)
    assert [b.run_id for b in rep.bench] == ["20261202T132000Z-sweep"]
    assert rep.bench[0].rows[1]["acceptance_pct"] == 40.0


def test_eval_runs_are_reported_apart_from_bench(night: dict[str, Any], tmp_path: Path) -> None:
    # Issue 21: eval results "in the morning report when that exists". An eval run shares the
    # runs dir with bench; it was listed as a bench run with empty rows.
    rep, _ = _report(night)
    assert all(b.kind != "eval" for b in rep.bench)
    (ev,) = rep.evals
    assert ev.run_id == "20261202T133000Z-eval" and ev.finished and ev.restarts == 1
    assert ev.thinking is False and ev.rows[0]["score"] == 0.854
    html = tmp_path / "night.html"
    res = CliRunner().invoke(
        app, ["report", "--from-dir", str(night["dir"]), "--since", str(T0 - 60),
              "--until", str(T0 + 3 * 3600), "--html", str(html), "--json"],
    )  # fmt: skip
    doc = json.loads(res.stdout)
    assert [e["run_id"] for e in doc["eval"]] == ["20261202T133000Z-eval"]
    assert "Evaluations in the window" in html.read_text() and "kormedmcqa" in html.read_text()


def test_window_in_the_operators_zone() -> None:
    now = datetime(2026, 12, 3, 9, 15, tzinfo=KST).timestamp()
    since, until = parse_window("22:00", "07:30", KST, now)
    assert datetime.fromtimestamp(since, KST).strftime("%d %H:%M") == "02 22:00"
    assert datetime.fromtimestamp(until, KST).strftime("%d %H:%M") == "03 07:30"
    assert (until - since) / 3600 == 9.5


def test_plot_marks_every_throttle_episode(night: dict[str, Any]) -> None:
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    rep, records = _report(night)
    fig = thermal_figure(rep.thermal, records, KST, ROLES)
    try:
        axes = {ax.get_title(loc="left").split(" ")[0]: ax for ax in fig.axes}
        assert set(axes) == set(NODES)  # one panel per node
        for n in rep.thermal.nodes:
            spans = [p for p in axes[n.node].patches if p.get_gid() == THROTTLE_GID]
            assert len(spans) == n.throttle.episodes
            for patch, (a, b) in zip(spans, n.throttle_spans, strict=True):
                x0, x1 = sorted(patch.get_path().vertices[:, 0])[::3][:2]
                got = mdates.num2date(patch.get_x(), tz=KST).timestamp()
                assert got == pytest.approx(a, abs=1)
                assert patch.get_width() * 86400 == pytest.approx(b - a, abs=1)
        node2 = axes["node2"]
        assert "°C" in node2.get_ylabel() and "2 throttle episode(s)" in node2.get_title(loc="left")
        assert "KST" in fig.axes[-1].get_xlabel() and "KST" in fig._suptitle.get_text()
        ticks = [t.get_text() for t in fig.axes[-1].get_xticklabels()]
        fig.canvas.draw()
        ticks = [t.get_text() for t in fig.axes[-1].get_xticklabels()]
        assert ticks and all(len(t) == 5 and t[2] == ":" for t in ticks if t), ticks
        assert any(t.startswith("22:") for t in ticks)  # KST, not UTC (13:xx)
    finally:
        plt.close(fig)


def test_cli_report_json_html_and_png(night: dict[str, Any], tmp_path: Path) -> None:
    html, png = tmp_path / "night.html", tmp_path / "night.png"
    args = ["report", "--from-dir", str(night["dir"]), "--since", str(T0),
            "--until", str(T0 + 10 * SAMPLES), "--tz", "Asia/Seoul", "--head", "node1",
            *[x for k, v in ROLES.items() for x in ("--zone-role", f"{k}={v}")]]  # fmt: skip
    result = CliRunner().invoke(app, [*args, "--json", "--html", str(html), "--plot", str(png)])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["schema_version"] == 1 and doc["command"] == "report"
    assert doc["since_local"].startswith("2026-12-02T22:00") and doc["tz"] == "Asia/Seoul"
    assert doc["throttle_episodes"] == 2 and len(doc["watchdog"]["restarts"]) == 2
    page = html.read_text()
    assert "data:image/png;base64," in page and "GPU zone" in page and "KST" in page
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = CliRunner().invoke(app, args)
    assert text.exit_code == 0, text.output
    assert "probe_failures" in text.stdout and "P-cores" in text.stdout


def test_zone_roles_resolve_by_name_index_then_type() -> None:
    from tpwarden.node.thermal.roles import zone_label, zone_role

    roles = {"thermal_zone1": "P-cores", "5": "GPU zone", "acpitz": "ACPI"}
    assert zone_role("thermal_zone1", "acpitz", roles) == "P-cores"
    assert zone_role("thermal_zone5", "acpitz", roles) == "GPU zone"
    assert zone_role("thermal_zone2", "acpitz", roles) == "ACPI"
    assert zone_role("thermal_zone2", "acpitz", None) is None
    assert zone_label("thermal_zone2", "acpitz", {}) == "thermal_zone2 (acpitz)"


def test_thermal_zones_survey_tells_the_gpu_zone_apart(night: dict[str, Any]) -> None:
    result = CliRunner().invoke(
        app, ["thermal", "zones", "--from-dir", str(night["dir"] / "thermal"), "--minutes", "30",
              "--json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    node2 = {z["zone"]: z for z in doc["zones"] if z["node"] == "node2"}
    assert len(node2) == 7 and {z["type"] for z in node2.values()} == {"acpitz"}
    assert node2["thermal_zone5"]["gpu_corr"] > 0.99  # follows the GPU through the heat fault
    assert node2["thermal_zone0"]["gpu_corr"] is None  # flat: says nothing
    assert node2["thermal_zone1"]["trips"]["critical"] == 104.8
    text = CliRunner().invoke(
        app, ["thermal", "zones", "--from-dir", str(night["dir"] / "thermal"), "--minutes", "30"]
    )
    assert text.exit_code == 0 and "tz5" in text.stdout


def test_thermal_report_in_the_operators_zone(night: dict[str, Any], tmp_path: Path) -> None:
    args = ["thermal", "report", "--from-dir", str(night["dir"] / "thermal"), "--tz",
            "Asia/Seoul", "--since", "2026-12-02T22:00", "--until", "2026-12-02T22:20",
            *[x for k, v in ROLES.items() for x in ("--zone-role", f"{k}={v}")]]  # fmt: skip
    text = CliRunner().invoke(app, [*args, "--plot", str(tmp_path / "t.png")])
    assert text.exit_code == 0, text.output
    assert "22:00 - 22:20 KST" in text.stdout and "P-cores" in text.stdout
    assert "13:0" not in text.stdout  # no UTC time left in the output
    doc = json.loads(CliRunner().invoke(app, [*args, "--json"]).stdout)
    assert doc["since_local"] == "2026-12-02T22:00:00+09:00"
    assert len(doc["throttle_spans_local"]["node2"]) == 2
    node1 = next(n for n in doc["nodes"] if n["node"] == "node1")
    assert node1["role_peaks"]["P-cores"]["peak_c"] == 82.0


def test_both_reports_read_a_zoneless_window_the_same_way(night: dict[str, Any]) -> None:
    # one parser for every --since/--until (issue 31, item 3): a time without a zone is read in
    # --tz by `report` and by `thermal report` alike (a second parser, unused, read it as UTC)
    window = ["--tz", "Asia/Seoul", "--since", "2026-12-02T22:00", "--until", "2026-12-02T22:20"]
    thermal = ["thermal", "report", "--from-dir", str(night["dir"] / "thermal")]
    morning = ["report", "--from-dir", str(night["dir"]), "--head", "node1"]
    docs = []
    for argv in (thermal, morning):
        res = CliRunner().invoke(app, [*argv, *window, "--json"])
        assert res.exit_code == 0, res.output
        docs.append(json.loads(res.stdout))
    for doc in docs:
        assert doc["since_local"] == "2026-12-02T22:00:00+09:00"
        assert doc["until_local"] == "2026-12-02T22:20:00+09:00"


def test_metrics_name_zone_roles_and_the_agent_gets_the_map(tmp_path: Path) -> None:
    from tpwarden.cluster.reports.thermal.remote import agent_argv
    from tpwarden.node.thermal.metrics import ThermalCollector

    root = build_fake_sysfs(tmp_path / "sys", zones=ZONES)
    clock = Clock(T0)
    agent = ThermalAgent("node1", 10.0, FakeGpuSampler(), SysfsZoneReader(root),
                         DurableWriter(tmp_path / "logs", "node1"), clock, lambda s: None)  # fmt: skip
    agent.anchor(T0)
    clock.now = T0 + 0.1
    agent.tick()
    name = "tpwarden_thermal_zone_temperature_celsius"
    metrics = {m.name: m for m in ThermalCollector(agent, clock, zone_roles=ROLES).collect()}
    roles = {(s.labels["zone"], s.labels["role"]) for s in metrics[name].samples}
    assert {r for r in roles if r[1]} == {
        ("1", "P-cores"), ("3", "E-cores"), ("5", "GPU zone"), ("0", "SoC")
    }  # fmt: skip
    assert {z for z, r in roles if not r} == {"2", "4", "6"}  # unmapped: role "" (same label set)
    plain = {m.name: m for m in ThermalCollector(agent, clock).collect()}
    assert {s.labels["role"] for s in plain[name].samples} == {""}

    class Th:
        dir, interval_s, metrics_port, alert_margin_c, disk_budget_mb = "/d", 10.0, 9411, 10.0, 512
        metrics_host = "127.0.0.1"
        zone_roles = {"5": "GPU zone"}

    class Spec:
        thermal = Th()

    class Node:
        name, role = "node1", "head"

    argv = agent_argv(Spec(), Node())
    assert argv[-2:] == ["--zone-role", "5=GPU zone"]


def test_cli_report_from_the_inventory(night: dict[str, Any], tmp_path: Path, monkeypatch) -> None:
    """-i: the watchdog log from the inventory's state_dir (the watchdog runs on this machine:
    tpwarden_watchdog_host: control), thermal files pulled from the nodes (SFTP replaced by a
    copy; node3 unreachable), zone roles from thermal.zone_roles."""
    import shutil

    from tpwarden.cluster.reports.thermal import fetch
    from tpwarden.cluster.reports.thermal.fetch import FetchResult

    good = (Path(__file__).parent / "inventories" / "good.yml").read_text()
    roles = ", ".join(f'"{k}": "{v}"' for k, v in ROLES.items())
    inv = tmp_path / "inv.yml"
    inv.write_text(
        good.replace("        failures: 3\n",
                     f"        failures: 3\n        state_dir: {night['dir']}\n")
        .replace("        interval_s: 10\n", f"        interval_s: 10\n        zone_roles: {{{roles}}}\n")
        .replace("          vllm_host_ip: 192.168.100.11\n",
                 "          vllm_host_ip: 192.168.100.11\n          tpwarden_watchdog_host: control\n")
    )  # fmt: skip

    def fake_fetch(spec, since, until, dest, remote_dir=None):
        for f in (night["dir"] / "thermal").glob("thermal-*.jsonl"):
            if "node3" not in f.name:
                shutil.copy(f, dest)
        return FetchResult(unreachable={"node3": "SSH connect timed out"})

    monkeypatch.setattr(fetch, "fetch_files", fake_fetch)
    monkeypatch.setenv("TPWARDEN_RUNS_DIR", str(night["dir"] / "runs"))
    monkeypatch.setenv("TPWARDEN_STATE_DIR", str(tmp_path / "state"))
    args = ["report", "-i", str(inv), "--since", str(T0), "--until", str(T0 + 10 * SAMPLES),
            "--tz", "Asia/Seoul", "--json"]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 1, result.output  # a node could not be read
    doc = json.loads(result.stdout)
    assert doc["unread"] == {"node3": "SSH connect timed out"}
    node1 = next(n for n in doc["thermal"]["nodes"] if n["node"] == "node1")
    assert node1["role"] == "head" and node1["role_peaks"]["P-cores"]["peak_c"] == 82.0
    node3 = next(n for n in doc["thermal"]["nodes"] if n["node"] == "node3")
    assert node3["samples_received"] == 0  # named by the inventory, no samples
    assert len(doc["bench"]) == 1 and doc["watchdog"]["probes"] == 40


def test_a_restart_while_tokens_grew_is_a_false_restart_candidate() -> None:
    from tpwarden.cluster.reports.morning import summarize_watchdog

    def probe(ts, verdict, tokens):
        values = {"vllm:generation_tokens_total": tokens}
        return {"ts": ts, "kind": "probe", "verdict": verdict, "metrics": {"values": values}}

    events = [
        probe(0, "ok", 10), probe(120, "stalled", 10), probe(240, "hard_fail", 500),
        probe(360, "stalled", 900),
        {"ts": 361, "kind": "restart_begin", "restart_id": "r1", "cause": "probe_failures",
         "reason": "3 consecutive failed probes"},
        {"ts": 500, "kind": "restart_end", "restart_id": "r1", "ok": True},
        probe(600, "ok", 0),
    ]  # fmt: skip
    wd = summarize_watchdog(events)
    assert wd.false_restart_candidates == 1
    assert "generation_tokens_total grew" in (wd.restarts[0].why_candidate or "")
    assert wd.restarts[0].back_after_s == 239.0
    flat = [e if e.get("kind") != "probe" or e["ts"] in (0, 600) else probe(e["ts"], e["verdict"], 10)
            for e in events]  # fmt: skip
    assert summarize_watchdog(flat).false_restart_candidates == 0


def test_restarts_carry_the_incident_dossier_suspect():
    """Issue 32: a watchdog restart's evidence names its dossier; the report lists the suspect
    (or why there is no dossier) in the restart table and the text lines."""
    from datetime import UTC

    from tpwarden.cluster.reports.morning import MorningReport, summarize_watchdog
    from tpwarden.cluster.reports.morning_html import RESTART_HEAD, restart_rows

    summary = "suspect: node3 (rank 2): process 2765 (python) stopped (T)"
    incident = {"id": "20261204T031500Z", "suspect": "node3", "summary": summary}
    events = [
        {"ts": 10, "kind": "restart_begin", "restart_id": "r1", "cause": "probe_failures",
         "reason": "3 consecutive failed probes"},
        {"ts": 13, "kind": "incident_dossier", "restart_id": "r1", **incident},
        {"ts": 20, "kind": "restart_end", "restart_id": "r1", "ok": True},
        {"ts": 900, "kind": "restart_begin", "restart_id": "r2", "cause": "probe_failures",
         "reason": "3 consecutive failed probes"},
        {"ts": 915, "kind": "incident_dossier", "restart_id": "r2",
         "error": "CallTimedOut: dossier"},
    ]  # fmt: skip
    wd = summarize_watchdog(events)
    assert (wd.restarts[0].suspect, wd.restarts[0].incident_id) == (summary, incident["id"])
    assert wd.restarts[1].suspect == "no dossier: CallTimedOut: dossier"
    assert summarize_watchdog(events[:1]).restarts[0].suspect is None  # no dossier event
    rep = MorningReport.__new__(MorningReport)
    object.__setattr__(rep, "watchdog", wd)
    rows = restart_rows(rep, UTC)
    assert RESTART_HEAD[-1] == "suspect" and rows[0][-1] == summary


def test_an_eval_suite_is_listed_with_each_tasks_score_against_the_previous_run(
    night: dict[str, Any],
) -> None:
    # Issue 34: "the morning report lists the suite with per-task scores against the previous
    # run". The previous run is the latest earlier eval run that scored the task on the same
    # path (a path change is not a comparison), even one from before the window.
    from dataclasses import replace
    from types import SimpleNamespace

    from tpwarden.cluster.reports.morning import summarize_evals
    from tpwarden.cluster.reports.morning_html import eval_rows, text_lines

    def run(hours: float, suite, rows):
        at = datetime.fromtimestamp(T0 + hours * 3600, tz=KST).isoformat()
        manifest = {"run_id": f"r{hours}", "kind": "eval", "started_at": at, "finished_at": at,
                    "options": {"suite": suite}, "restarts": []}  # fmt: skip
        return manifest, {"kind": "eval", "rows": rows}

    older = run(-48, None, [{"task": "gsm8k", "path": "generate/chat", "score": 0.90}])
    old = run(-24, "field", [
        {"task": "mmlu", "path": "loglikelihood/completions", "score": 0.870},
        {"task": "gsm8k", "path": "generate/completions", "score": 0.93},
    ])  # fmt: skip
    now = run(1, "field", [
        {"task": "mmlu", "path": "loglikelihood/completions", "score": 0.879, "n": 14042},
        {"task": "gsm8k", "path": "generate/chat", "score": 0.945, "n": 1319},
        {"task": "humaneval", "path": "generate/completions", "score": 0.75, "n": 164},
    ])  # fmt: skip
    (ev,) = summarize_evals([now, older, old], since=T0, until=T0 + 2 * 3600)
    assert ev.suite == "field"
    prev = {r["task"]: (r["previous"], r["delta_points"]) for r in ev.rows}
    assert prev["mmlu"] == (0.870, pytest.approx(0.9))
    assert prev["gsm8k"] == (0.90, pytest.approx(4.5))  # the chat run, not the completions one
    assert prev["humaneval"] == (None, None)
    rows = eval_rows(SimpleNamespace(evals=(ev,)), KST)
    assert rows[0][2] == "field" and rows[0][-2:] == ["0.8700", "+0.9"]
    rep, _ = _report(night)
    lines = [x for x in text_lines(replace(rep, evals=(ev,)), KST) if x.startswith("eval ")]
    assert "(suite field): gsm8k (generate/chat)" in lines[1]
    assert "score 0.9450 +/- - (previous 0.9000, +4.5 points)" in lines[1]


# -- the sample night (`report --sample`, issue 30) ---------------------------------------------
ROOT = Path(__file__).resolve().parents[2]


def test_the_shipped_sample_is_this_builders_night(tmp_path: Path) -> None:
    """cluster/data/sample-night.tar.gz is what tools/sample_night.py makes of build_night:
    regenerate it (python tools/sample_night.py) when the night or the writers change."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("sample_night", ROOT / "tools/sample_night.py")
    assert spec is not None and spec.loader is not None
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    fresh = tool.pack(build_night(tmp_path)["dir"])
    assert fresh == (ROOT / "cluster" / "data" / "sample-night.tar.gz").read_bytes()


def test_report_sample_needs_no_cluster(tmp_path: Path) -> None:
    html, png = tmp_path / "night.html", tmp_path / "night.png"
    runner = CliRunner()
    done = runner.invoke(app, ["report", "--sample", "--json", "--html", str(html),
                               "--plot", str(png)])  # fmt: skip
    assert done.exit_code == 0, done.output
    doc = json.loads(done.stdout)
    assert (doc["command"], doc["ok"], doc["tz"]) == ("report", True, "Asia/Seoul")
    assert sorted(n["node"] for n in doc["thermal"]["nodes"]) == list(NODES)
    restarts = doc["watchdog"]["restarts"]
    assert [(r["by"], r["cause"]) for r in restarts] == [
        ("watchdog", "probe_failures"),
        ("kim@laptop", "operator"),
    ], restarts
    assert html.read_text().startswith("<!doctype html>") and png.read_bytes()[:4] == b"\x89PNG"
    text = runner.invoke(app, ["report", "--sample", "--tz", "UTC"])
    assert text.exit_code == 0 and "Night report, Wed 2 Dec 13:00 - 13:20 UTC" in text.stdout
    assert "hottest P-cores 82.0" in text.stdout  # the sample's zone roles


def test_report_sample_is_one_source_of_three(tmp_path: Path) -> None:
    done = CliRunner().invoke(app, ["report", "--sample", "--from-dir", str(tmp_path)])
    assert done.exit_code == 2
    assert "exactly one of --inventory/-i, --from-dir and --sample" in done.output
