"""The overnight Grafana dashboard (package data): valid JSON with the structure Grafana needs,
every query valid PromQL for Prometheus 2.42 (checked by promtool as recording rules) and naming
only metrics that tpwarden's exporters or vLLM export."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml
from tpwarden.watchdog.monitoring_files import dashboard_path, rules_path

from tests.unit.monitoring_names import known_metric_names, metric_names_in, unknown_names
from tests.unit.test_alert_rules import CONTRACT_ALERTS, run_promtool

DATASOURCE = "${datasource}"


def dashboard() -> dict[str, Any]:
    return json.loads(dashboard_path().read_text())


def panels(dash: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for p in dash["panels"]:
        out.append(p)
        out.extend(p.get("panels", []))  # collapsed rows keep theirs inside
    return out


def queries(dash: dict[str, Any]) -> list[str]:
    exprs = [t["expr"] for p in panels(dash) for t in p.get("targets", [])]
    exprs += [a["expr"] for a in dash["annotations"]["list"] if "expr" in a]
    for var in dash["templating"]["list"]:
        if var["type"] == "query":
            exprs.append(var["query"]["query"] if isinstance(var["query"], dict) else var["query"])
    return exprs


def test_structure_grafana_needs() -> None:
    dash = dashboard()
    assert dash["title"] and dash["uid"] and isinstance(dash["schemaVersion"], int)
    all_panels = panels(dash)
    ids = [p["id"] for p in all_panels]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    cells: set[tuple[int, int]] = set()
    for p in all_panels:
        g = p["gridPos"]
        assert {"h", "w", "x", "y"} <= set(g) and all(isinstance(g[k], int) for k in "hwxy"), p
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24 and g["h"] > 0, p["title"]
        mine = {
            (x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])
        }
        assert not mine & cells, f"panel {p['title']!r} overlaps another"
        cells |= mine
        if p["type"] == "row":
            continue
        assert p["datasource"]["uid"] == DATASOURCE, p["title"]
        assert p["targets"], f"panel {p['title']!r} has no query"
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs)), p["title"]
        assert all(t["expr"].strip() and t["datasource"]["uid"] == DATASOURCE for t in p["targets"])


def test_datasource_is_a_template_variable() -> None:
    variables = {v["name"]: v for v in dashboard()["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert variables["node"]["datasource"]["uid"] == DATASOURCE


def test_overnight_view_has_what_the_issue_asks() -> None:
    dash = dashboard()
    exprs = " ".join(queries(dash))
    for name in (
        "tpwarden_gpu_temperature_celsius",
        "tpwarden_thermal_zone_temperature_celsius",
        "tpwarden_thermal_zone_trip_celsius",  # the critical line
        "tpwarden_gpu_sm_clock_hertz",
        "tpwarden_gpu_throttle_active",
        "vllm:generation_tokens_total",
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
    ):
        assert name in exprs, name
    assert 'trip_type="critical"' in exprs
    annotations = [a["expr"] for a in dash["annotations"]["list"] if "expr" in a]
    assert any("tpwarden_watchdog_restarts_total" in a for a in annotations)
    (alerts,) = [a for a in annotations if a.startswith("ALERTS")]
    pattern = re.search(r'alertname=~"([^"]+)"', alerts).group(1)
    assert all(re.fullmatch(pattern, name) for name in CONTRACT_ALERTS)


def test_every_query_is_valid_promql(tmp_path: Path) -> None:
    # Grafana's variables replaced by what it would send; promtool parses each as a recording rule
    substituted = [
        e.replace("$__rate_interval", "1m").replace("$node", ".*") for e in queries(dashboard())
    ]
    substituted = [e for e in substituted if not e.startswith("label_values(")]
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:query_{i}", "expr": e} for i, e in enumerate(substituted)
    ]}]}  # fmt: skip
    path = tmp_path / "dashboard-queries.yml"
    path.write_text(yaml.safe_dump(rules))
    done = run_promtool("check", "rules", str(path))
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_metric_in_the_dashboard_is_exported() -> None:
    exprs = queries(dashboard())
    assert all(metric_names_in(e) for e in exprs)  # the reader found names in every query
    missing = unknown_names(exprs, known_metric_names())
    assert not missing, f"dashboard queries name metrics nothing exports: {missing}"


def test_monitoring_files_are_package_data() -> None:
    assert rules_path().is_file() and dashboard_path().is_file()
    assert rules_path().parent == dashboard_path().parent
    pyproject = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
    assert '"tpwarden.watchdog" = ["monitoring/*"]' in pyproject
