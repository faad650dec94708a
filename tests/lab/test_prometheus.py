"""The lab's Prometheus (Debian's 2.42, started by `lab up` with the config `tpwarden prometheus
config` generates) scrapes every node's thermal agent, the watchdog and vLLM's /metrics; tpwarden's
alert rules fire on a heat fault (TpwardenNodeNearCritical, within two evaluation intervals of
the hot sample) and on a hung server (TpwardenServerHung, a paused worker rank while the watchdog
is held: it keeps probing and counting, restarts nothing)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from tpwarden.cluster.cli.thermal import app as thermal_app
from tpwarden.cluster.control.controller import Controller
from tpwarden.cluster.inventory.load import load_inventory
from tpwarden.lab import faults
from tpwarden.lab import prometheus as labprom
from tpwarden.watchdog.prometheus_config import default_rules_path
from typer.testing import CliRunner

from tests.lab.waiting import poll

pytestmark = pytest.mark.lab
NODES = ("node1", "node2", "node3", "node4")
WORKER = "node3"
EVAL_S = labprom.INTERVAL_S


class Prom:
    """Prometheus's HTTP API (loopback)."""

    def __init__(self, url: str) -> None:
        self.http = httpx.Client(base_url=url, timeout=10)

    def api(self, path: str, **params: Any) -> Any:
        doc = self.http.get(f"/api/v1/{path}", params=params).json()
        assert doc["status"] == "success", doc
        return doc["data"]

    def query(self, expr: str) -> list[dict]:
        return self.api("query", query=expr)["result"]

    def value(self, expr: str) -> float | None:
        res = self.query(expr)
        return float(res[0]["value"][1]) if res else None

    def targets(self) -> list[dict]:
        return self.api("targets", state="active")["activeTargets"]

    def alerts(self, name: str) -> list[dict]:
        return [a for a in self.api("alerts")["alerts"] if a["labels"].get("alertname") == name]


def thermal(*args: str, ok: bool = True) -> Any:
    res = CliRunner().invoke(thermal_app, list(args))
    if ok:
        assert res.exit_code == 0, res.output
    return res


def _epoch(rfc3339: str) -> float:
    # Prometheus writes nanoseconds ("2026-12-03T11:02:03.123456789Z"); Python takes micro
    head, _, frac = rfc3339.rstrip("Z").partition(".")
    stamp = datetime.fromisoformat(head + "+00:00").timestamp()
    return stamp + (float("0." + frac) if frac else 0.0)


@pytest.fixture(scope="module")
def stack(lab, tmp_path_factory):
    """Server up, thermal agents on every node, `tpwarden watchdog run` on this machine."""
    inv = str(lab.inventory)
    tmp = tmp_path_factory.mktemp("prom")
    control = tmp / "control"
    spec = load_inventory(lab.inventory)
    status = labprom.status(lab.paths)
    assert status.running, "lab up did not start Prometheus"
    prom = Prom(status.url)
    env = {**os.environ, "TPWARDEN_STATE_DIR": str(control)}
    tpwarden = os.path.join(os.path.dirname(sys.executable), "tpwarden")
    daemon = None
    with Controller(spec, state_dir=control, node_timeout_s=10) as ctl:
        result = ctl.up(timeout_s=300)
        assert result.ok, (result.outcomes, result.boot and result.boot.reason)
        log = tmp / "watchdog.log"
        try:  # cleanup also when starting fails halfway (agents left running fail later tests)
            thermal("start", "-i", inv)
            with open(log, "ab") as out:
                daemon = subprocess.Popen(
                    [tpwarden, "watchdog", "run", "-i", inv], stdout=out,
                    stderr=subprocess.STDOUT, env=env,
                )  # fmt: skip
            yield {"prom": prom, "spec": spec, "ctl": ctl, "inv": inv, "env": env, "tmp": tmp,
                   "control": control, "tpwarden": tpwarden}  # fmt: skip
        finally:
            with contextlib.suppress(Exception):
                faults.container_action(lab.paths, WORKER, "unpause")
            faults.cool(lab.paths, "node2")
            subprocess.run([tpwarden, "watchdog", "release", "-i", inv], env=env, check=False)
            if daemon is not None:
                daemon.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    daemon.wait(timeout=20)
                if daemon.poll() is None:
                    daemon.kill()
            thermal("stop", "-i", inv, ok=False)
            if not ctl.probe(timeout=5)[0]:
                ctl.restart("test cleanup", timeout_s=300)
            print(log.read_text()[-2000:] if log.exists() else "")


def test_every_target_is_up(stack):
    prom = stack["prom"]

    def all_up() -> list[dict] | None:
        ts = prom.targets()
        return ts if len(ts) == 6 and all(t["health"] == "up" for t in ts) else None

    try:
        targets = poll(all_up, 90, "6 targets up")
    except AssertionError:
        pytest.fail(json.dumps([(t["scrapeUrl"], t["health"], t["lastError"])
                                for t in prom.targets()]))  # fmt: skip
    jobs = sorted(t["labels"]["job"] for t in targets)
    assert jobs == ["tpwarden-thermal"] * 4 + ["tpwarden-watchdog", "vllm"]
    thermal_nodes = {
        t["labels"]["node"] for t in targets if t["labels"]["job"] == "tpwarden-thermal"
    }
    assert thermal_nodes == set(NODES)
    # each agent is dialled at its own node address (host var tpwarden_thermal_metrics_host)
    urls = {
        t["labels"]["node"]: t["scrapeUrl"]
        for t in targets
        if t["labels"]["job"] == "tpwarden-thermal"
    }
    assert urls == {n: f"http://127.0.0.1{n[-1]}:9411/metrics" for n in NODES}
    ups = prom.query("up")
    assert len(ups) == 6 and {u["value"][1] for u in ups} == {"1"}
    # real series arrive through each job: vLLM's own counters and the watchdog's state
    assert prom.query('{job="vllm",__name__=~"vllm:.*"}')
    assert prom.query('{job="tpwarden-watchdog",__name__=~"tpwarden_watchdog_.*"}')
    assert prom.query('{job="tpwarden-thermal",__name__=~".+",node="node4"}')


def _rules_loaded(prom: Prom) -> set[str]:
    groups = prom.api("rules")["groups"]
    return {r["name"] for g in groups for r in g["rules"]}


@pytest.fixture
def rules(stack):
    assert os.path.isfile(default_rules_path()), f"{default_rules_path()} missing from the package"
    names = _rules_loaded(stack["prom"])
    assert {"TpwardenNodeNearCritical", "TpwardenServerHung"} <= names, names
    return names


def test_heat_fault_fires_near_critical_within_two_evaluations(stack, lab, rules):
    prom = stack["prom"]
    spec = stack["spec"]
    margin = prom.value('tpwarden_thermal_alert_margin_celsius{node="node2"}')
    assert margin == spec.thermal.alert_margin_c
    assert not [a for a in prom.alerts("TpwardenNodeNearCritical") if a["state"] == "firing"]
    t_fault = time.time()
    faults.heat(lab.paths, "node2", zones={"gpu": 100.0}, duration_s=90)  # 4.8 C below critical
    selector = 'tpwarden_thermal_zone_critical_margin_celsius{node="node2"}'

    def first_hot() -> float | None:
        for series in prom.query(f"{selector}[60s]"):
            for ts, value in series["values"]:
                if float(ts) >= t_fault and float(value) < margin:
                    return float(ts)
        return None

    scraped = poll(first_hot, 30, "the hot sample scraped")

    def firing() -> dict | None:
        got = [a for a in prom.alerts("TpwardenNodeNearCritical")
               if a["state"] == "firing" and a["labels"].get("node") == "node2"]  # fmt: skip
        return got[0] if got else None

    alert = poll(firing, 4 * EVAL_S + 10, "TpwardenNodeNearCritical firing", every_s=0.2)
    active_at = _epoch(alert["activeAt"])
    print(f"hot sample scraped at {scraped:.3f}, alert active at {active_at:.3f} "
          f"(+{active_at - scraped:.2f} s; evaluation interval {EVAL_S:g} s)")  # fmt: skip
    assert scraped <= active_at <= scraped + 2 * EVAL_S
    assert alert["labels"]["severity"] in ("critical", "warning")
    faults.cool(lab.paths, "node2")


def test_hung_server_fires_while_the_held_watchdog_keeps_counting(stack, lab, rules):
    prom, env, tpwarden, inv = stack["prom"], stack["env"], stack["tpwarden"], stack["inv"]
    poll(lambda: prom.value('tpwarden_watchdog_state{tpwarden_watchdog_state="ready"}') == 1,
         120, "the watchdog ready (seen by Prometheus)")  # fmt: skip
    hold = [tpwarden, "watchdog", "hold", "-i", inv, "--for", "10m", "--reason", "prom lab test"]
    subprocess.run(hold, env=env, check=True)
    poll(lambda: prom.value("tpwarden_watchdog_hold") == 1, 30, "the hold exported")
    probes_before = prom.value("sum(tpwarden_watchdog_probe_total)") or 0.0
    faults.container_action(lab.paths, WORKER, "pause")

    def firing() -> dict | None:
        got = [a for a in prom.alerts("TpwardenServerHung") if a["state"] == "firing"]
        return got[0] if got else None

    alert = poll(firing, 150, "TpwardenServerHung firing", every_s=1)
    assert alert["labels"]["severity"] == "critical"
    failures = prom.value("tpwarden_watchdog_consecutive_failures")
    failures_cfg = stack["spec"].watchdog.failures
    assert failures is not None and failures >= failures_cfg, failures
    assert (prom.value("sum(tpwarden_watchdog_probe_total)") or 0.0) > probes_before + failures_cfg
    # held: it counted past the restart threshold and restarted nothing
    assert (prom.value("sum(tpwarden_watchdog_restarts_total)") or 0.0) == 0.0
    events = Path(stack["control"]) / "events.jsonl"
    restarts = [
        line for line in (events.read_text().splitlines() if events.exists() else [])
        if json.loads(line).get("event") == "restart"
    ]  # fmt: skip
    assert not restarts, restarts
    faults.container_action(lab.paths, WORKER, "unpause")
    subprocess.run([tpwarden, "watchdog", "release", "-i", inv], env=env, check=True)
