"""Pure parts of operating the agents over SSH: unit facts, start/stop plans, status and live
rows, the node-side status and the zipapp's contents. No network."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path
from types import SimpleNamespace

from tpwarden.cluster.cli.thermal import app
from tpwarden.cluster.node_zipapp import THERMAL_AGENT, build_node_zipapp
from tpwarden.cluster.reports.thermal.fetch import wanted
from tpwarden.cluster.reports.thermal.remote import (
    AGENT_PATH,
    PERMANENT_UNIT,
    TRANSIENT_UNIT,
    UnitFacts,
    last_record,
    live_row,
    newest_file,
    parse_units,
    plan_start,
    plan_stop,
    status_row,
)
from tpwarden.node.thermal.app import node_status
from typer.testing import CliRunner

SHOW = f"""Id={PERMANENT_UNIT}
LoadState=not-found
ActiveState=inactive
SubState=dead
MainPID=0
NRestarts=

Id={TRANSIENT_UNIT}
LoadState=loaded
ActiveState=active
SubState=running
MainPID=4242
NRestarts=2
"""
THERMAL = SimpleNamespace(
    interval_s=1.0, dir="/var/log/tpwarden/thermal", disk_budget_mb=512, metrics_port=9411,
    alert_margin_c=10.0, metrics_host="127.0.0.1",
)  # fmt: skip
SPEC = SimpleNamespace(thermal=THERMAL)
NODE = SimpleNamespace(name="node2", role="worker")


def test_parse_units_recorded_systemctl_show() -> None:
    u = parse_units(SHOW)
    assert not u[PERMANENT_UNIT].loaded and not u[PERMANENT_UNIT].active
    t = u[TRANSIENT_UNIT]
    assert t.loaded and t.active and t.main_pid == 4242 and t.restarts == 2


def test_start_plan_copies_the_zipapp_and_restarts_the_transient_unit() -> None:
    plan = plan_start(SPEC, NODE, parse_units(SHOW))
    assert plan.unit == TRANSIENT_UNIT
    puts = [s.put for s in plan.steps if s.put]
    assert puts == [AGENT_PATH + ".new"]
    argvs = [s.argv for s in plan.steps if s.argv]
    assert ("systemctl", "stop", TRANSIENT_UNIT) in argvs
    run = argvs[-1]
    assert run[:3] == ("systemd-run", "--unit", TRANSIENT_UNIT)
    assert "--property=Restart=on-failure" in run
    i = run.index("python3")
    assert run[i : i + 3] == ("python3", AGENT_PATH, "agent")
    assert run[run.index("--node") + 1] == "node2" and run[run.index("--interval") + 1] == "1"
    assert run[run.index("--metrics-host") + 1] == "127.0.0.1"
    assert all(isinstance(a, str) for s in plan.steps for a in s.argv)  # argv lists, no shell


def test_start_plan_prefers_the_installed_unit_and_stops_a_transient_one() -> None:
    units = {PERMANENT_UNIT: UnitFacts("loaded"), TRANSIENT_UNIT: UnitFacts("loaded", "active")}
    plan = plan_start(SPEC, NODE, units)
    assert plan.unit == PERMANENT_UNIT and not any(s.put for s in plan.steps)
    assert [s.argv for s in plan.steps] == [
        ("systemctl", "stop", TRANSIENT_UNIT),
        ("systemctl", "start", PERMANENT_UNIT),
    ]


def test_start_plan_waits_for_a_transient_unit_still_stopping() -> None:
    # lab CI: `thermal stop` gave up on a loaded node while the agent was still flushing; the
    # next `thermal start` saw it `deactivating` and systemd-run refused "already loaded"
    units = {TRANSIENT_UNIT: UnitFacts("loaded", "deactivating")}
    argvs = [s.argv for s in plan_start(SPEC, NODE, units).steps if s.argv]
    stop = argvs.index(("systemctl", "stop", TRANSIENT_UNIT))
    assert stop < argvs.index(("systemctl", "reset-failed", TRANSIENT_UNIT)) < len(argvs) - 1
    assert argvs[-1][0] == "systemd-run"
    assert ("systemctl", "stop", TRANSIENT_UNIT) in [s.argv for s in plan_stop(NODE, units).steps]


def test_start_plan_forgets_a_stopped_transient_unit_left_loaded() -> None:
    # lab CI: in systemd-nspawn machines a stopped transient unit stayed loaded from its
    # /run/systemd/transient fragment and systemd-run refused the name
    units = {TRANSIENT_UNIT: UnitFacts("loaded", "inactive")}
    argvs = [s.argv for s in plan_start(SPEC, NODE, units).steps if s.argv]
    rm = argvs.index(("rm", "-f", "--", "/run/systemd/transient/" + TRANSIENT_UNIT))
    assert argvs[rm + 1] == ("systemctl", "daemon-reload")
    assert argvs[-1][0] == "systemd-run" and ("systemctl", "stop", TRANSIENT_UNIT) not in argvs
    # nothing of this when no unit of that name is loaded
    fresh = [s.argv for s in plan_start(SPEC, NODE, {}).steps if s.argv]
    assert not any(a[0] == "rm" or a[-1] == "daemon-reload" for a in fresh)


def test_stop_plan_stops_whichever_runs_and_nothing_when_idle() -> None:
    assert plan_stop(NODE, {}).steps == ()
    units = {PERMANENT_UNIT: UnitFacts("loaded", "active")}
    assert [s.argv for s in plan_stop(NODE, units).steps] == [("systemctl", "stop", PERMANENT_UNIT)]


def test_status_row_from_facts() -> None:
    doc = {"now": 100.0, "latest": {"ts": 97.5, "errors": []}, "samples_today": 7,
           "bytes_used": 1000, "dropped_today": 3, "error": None}  # fmt: skip
    row = status_row("node2", parse_units(SHOW), doc, 2**20)
    assert row.running and row.unit == TRANSIENT_UNIT and row.restarts == 2
    assert row.last_sample_age_s == 2.5 and row.samples_today == 7 and row.dropped_today == 3
    idle = status_row("node2", {}, {"now": 1.0, "latest": None}, 1)
    assert not idle.running and idle.state == "not running" and idle.last_sample_age_s is None


def test_newest_file_and_torn_tail() -> None:
    names = ["thermal-node2-20260101.jsonl", "thermal-node2-20260102.jsonl",
             "thermal-node2-20260102-1.jsonl", "thermal-node22-20260103.jsonl", "x"]  # fmt: skip
    assert newest_file(names, "node2") == "thermal-node2-20260102-1.jsonl"
    assert last_record(b'{"a":1}\n{"a":2}\n{"a":') == {"a": 2}


def test_live_row_hottest_zone_margin_and_events() -> None:
    rec = {"ts": 10.0, "gpus": [{"temp_c": 61.0, "clock_event_reasons": ["sw_thermal_slowdown"]}],
           "zones": [{"name": "thermal_zone0", "type": "acpitz", "temp_c": 70.0,
                      "trips": [{"type": "critical", "temp_c": 104.8}]},
                     {"name": "thermal_zone1", "type": "cpu", "temp_c": None, "trips": []}]}  # fmt: skip
    r = live_row("node1", rec, 12.0)
    assert (r.gpu_temp_c, r.hottest_zone, r.margin_c, r.age_s) == (61.0, "acpitz", 34.8, 2.0)
    assert r.reasons == ("sw_thermal_slowdown",)
    assert live_row("node1", None, 1.0).note == "no samples yet"


def test_fetch_wants_the_nodes_files_in_the_window() -> None:
    days = {"20260102"}
    assert wanted("thermal-node2-20260102-1.jsonl", 5000.0, "node2", days, 1000.0)
    assert not wanted("thermal-node22-20260102.jsonl", 5000.0, "node2", days, 1000.0)
    assert not wanted("thermal-node2-20260101.jsonl", 5000.0, "node2", days, 1000.0)
    assert not wanted("thermal-node2-20260102.jsonl", 10.0, "node2", days, 1000.0)  # older


def test_node_status_counts_today_and_drops(tmp_path: Path) -> None:
    day = tmp_path / "thermal-n1-19700101.jsonl"
    day.write_text('{"ts": 1.0}\n{"ts": 2.0, "dropped_records": 4}\n{"ts": 3')
    doc = node_status("n1", tmp_path, 10.0)
    assert doc["samples_today"] == 2 and doc["dropped_today"] == 4
    assert doc["latest"]["ts"] == 2.0 and doc["bytes_used"] == day.stat().st_size
    assert node_status("n1", tmp_path / "none", 10.0)["files"] == 0


def test_zipapp_is_self_contained_and_runs_with_an_isolated_python(tmp_path: Path) -> None:
    pyz, sha = build_node_zipapp(THERMAL_AGENT, tmp_path / "a.pyz")
    assert build_node_zipapp(THERMAL_AGENT, tmp_path / "b.pyz")[1] == sha  # reproducible
    names = set(zipfile.ZipFile(pyz).namelist())
    assert {"tpwarden/node/gpu.py", "tpwarden/cluster/errors.py", "tpwarden/node/thermal/app.py",
            "prometheus_client/__init__.py", "__main__.py"} <= names  # fmt: skip
    assert not any(
        n.startswith(("tpwarden/cluster/cli", "tpwarden/cluster/ssh", "tpwarden/watchdog/daemon"))
        for n in names
    )
    (tmp_path / "d").mkdir()
    out = subprocess.run([sys.executable, "-I", "-S", str(pyz), "status", "--node", "n1",
                          "--dir", str(tmp_path / "d")], capture_output=True, text=True,
                         check=True, timeout=30).stdout  # fmt: skip
    assert json.loads(out)["files"] == 0


def test_zipapp_agent_serves_tpwarden_names_and_meminfo_without_psutil(tmp_path: Path) -> None:
    """The `thermal start` agent runs on the node's python3 (here -I -S: no site-packages, so
    no psutil and no pynvml): zones, node memory from /proc/meminfo and the alert margin."""
    import signal
    import socket
    import time
    import urllib.request

    from tpwarden.cluster.reports.thermal.fakes import build_fake_sysfs

    pyz, _ = build_node_zipapp(THERMAL_AGENT, tmp_path / "a.pyz")
    sysfs = build_fake_sysfs(tmp_path / "sys")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-I", "-S", str(pyz), "agent", "--node", "n1",
                             "--dir", str(tmp_path / "d"), "--interval", "0.2",
                             "--metrics-port", str(port), "--sysfs-root", str(sysfs),
                             "--alert-margin", "9", "--zone-role", "1=P-cores"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        text, deadline = "", time.monotonic() + 20
        while "tpwarden_node_memory_total_bytes{" not in text and time.monotonic() < deadline:
            time.sleep(0.1)
            try:
                url = f"http://127.0.0.1:{port}/metrics"
                text = urllib.request.urlopen(url, timeout=2).read().decode()
            except OSError:
                continue
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    lines = text.splitlines()
    total = next(ln for ln in lines if ln.startswith("tpwarden_node_memory_total_bytes{"))
    mem_total_kb = int(Path("/proc/meminfo").read_text().split()[1])  # MemTotal comes first
    assert float(total.split()[-1]) == mem_total_kb * 1024
    assert 'tpwarden_thermal_alert_margin_celsius{node="n1"} 9.0' in lines
    assert any(
        ln.startswith("tpwarden_thermal_zone_temperature_celsius{")
        and 'role="P-cores"' in ln
        and 'zone="1"' in ln
        for ln in lines
    )


def test_report_needs_exactly_one_source() -> None:
    res = CliRunner().invoke(app, ["report"])
    assert res.exit_code == 2


def test_agent_listens_where_the_inventory_says() -> None:
    # Issue 19: the agent bound /metrics to a hard-coded 127.0.0.1, so no Prometheus could scrape
    # it whatever thermal.metrics_host said; the node-side parser now takes the address.
    import socket

    from tpwarden.node.thermal import app as nodeapp

    seen: list[nodeapp.AgentOptions] = []
    orig = nodeapp.run_agent
    nodeapp.run_agent = seen.append  # type: ignore[assignment]
    try:
        nodeapp.main(["agent", "--node", "n1", "--metrics-host", "127.0.0.7"])
        nodeapp.main(["agent", "--node", "n1"])
    finally:
        nodeapp.run_agent = orig
    assert [o.metrics_host for o in seen] == ["127.0.0.7", "127.0.0.1"]
    assert seen[1].budget_bytes == 512 * 2**20  # the spec's disk_budget_mb default
    from tpwarden.node.thermal.metrics import MetricsServer

    class Nothing:
        def collect(self):
            return iter(())

    server = MetricsServer(Nothing(), "127.0.0.7", 0)
    port = server.start()
    try:
        with socket.create_connection(("127.0.0.7", port), timeout=2):
            pass
    finally:
        server.stop()


def test_call_each_node_keeps_node_order_and_sorts_failures() -> None:
    from tpwarden.cluster.errors import NodeUnreachable, TpwardenError
    from tpwarden.cluster.reports.thermal.remote import NodeCall, call_each_node

    def call(node: SimpleNamespace) -> int:
        if node.name == "dead":
            raise NodeUnreachable("dead", "no route to host")
        if node.name == "bad":
            raise TpwardenError("bad: permission denied")
        if node.name == "torn":
            raise EOFError("transport closed")
        return len(node.name)

    nodes = [SimpleNamespace(name=n) for n in ("n1", "dead", "bad", "torn")]
    assert call_each_node(nodes, call) == [  # type: ignore[arg-type]
        NodeCall("n1", True, 2),
        NodeCall("dead", False, error="no route to host", unreachable=True),
        NodeCall("bad", False, error="bad: permission denied"),
        NodeCall("torn", False, error="EOFError: transport closed", unreachable=True),
    ]
    assert call_each_node([], call) == []
