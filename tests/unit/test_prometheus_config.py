"""`tpwarden prometheus config`: targets from listen addresses, loopback errors with the fix, the
API key by file only, per-host thermal metrics addresses, and the real promtool accepts it."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from ruamel.yaml import YAML
from tpwarden.cluster.cli import app
from tpwarden.cluster.errors import ConfigError
from tpwarden.cluster.inventory.load import parse_inventory
from tpwarden.cluster.reports.thermal.remote import agent_argv
from tpwarden.lab.inventory import inventory_doc
from tpwarden.lab.paths import LabPaths
from tpwarden.watchdog.prometheus_config import PromOptions, build_config, duration, render_yaml
from typer.testing import CliRunner

EXAMPLE = Path(__file__).resolve().parents[2] / "inventory.example.yml"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
RULES = """groups:
- name: tpwarden-test
  rules:
  - alert: Anything
    expr: up == 0
    labels: {severity: warning}
"""


def _yaml_text(doc: dict) -> str:
    out = io.StringIO()
    YAML().dump(doc, out)
    return out.getvalue()


def _example() -> dict:
    return YAML(typ="safe").load(EXAMPLE.read_text())


def _lab_spec(tmp_path: Path):
    return parse_inventory(_yaml_text(inventory_doc(LabPaths(tmp_path / "lab"))))


def _promtool_check(tmp_path: Path, text: str) -> subprocess.CompletedProcess:
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text(text)
    return subprocess.run(
        [PROMTOOL, "check", "config", str(cfg)], capture_output=True, text=True, check=False
    )


@pytest.mark.skipif(not Path(PROMTOOL).is_file(), reason="promtool not installed")
def test_the_lab_config_passes_the_real_promtool(tmp_path):
    rules = tmp_path / "rules.yml"
    rules.write_text(RULES)
    cfg = build_config(_lab_spec(tmp_path), PromOptions(2, 2, str(rules)))
    assert not cfg.errors
    proc = _promtool_check(tmp_path, render_yaml(cfg))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 rules found" in proc.stdout + proc.stderr  # the rule file was read, not skipped
    assert cfg.doc["global"] == {
        "scrape_interval": "2s",
        "scrape_timeout": "2s",
        "evaluation_interval": "2s",
    }
    # each node's agent at its own address (host var tpwarden_thermal_metrics_host), node label
    assert cfg.targets("tpwarden-thermal") == [f"127.0.0.1{i}:9411" for i in range(1, 5)]
    groups = cfg.doc["scrape_configs"][0]["static_configs"]
    assert [g["labels"]["node"] for g in groups] == ["node1", "node2", "node3", "node4"]
    assert cfg.targets("tpwarden-watchdog") == ["127.0.0.1:9410"]
    assert cfg.targets("vllm") == ["127.0.0.11:8000"]
    # the watchdog on "control" listens on loopback: fine only beside Prometheus, said so
    (warning,) = [f for f in cfg.warnings if f.job == "tpwarden-watchdog"]
    assert "only a Prometheus on control" in warning.message


@pytest.mark.skipif(not Path(PROMTOOL).is_file(), reason="promtool not installed")
def test_promtool_rejects_what_a_missing_rules_file_would_break(tmp_path):
    """The check above is real: promtool fails a config whose rule file is absent."""
    cfg = build_config(_lab_spec(tmp_path), PromOptions(2, rules_path=str(tmp_path / "no.yml")))
    assert _promtool_check(tmp_path, render_yaml(cfg)).returncode != 0


def test_loopback_on_a_node_is_an_error_with_the_fix_and_the_cli_writes_nothing(tmp_path):
    spec = parse_inventory(EXAMPLE.read_text())
    cfg = build_config(spec, PromOptions(rules_path="/r.yml"))
    thermal = [f for f in cfg.errors if f.job == "tpwarden-thermal"]
    assert [f.target for f in thermal] == ["127.0.0.1:9411"] * 4
    assert "tpwarden_thermal_metrics_host of node2" in thermal[1].fix
    assert "10.0.0.12" in thermal[1].fix
    (wd,) = [f for f in cfg.errors if f.job == "tpwarden-watchdog"]  # default: on the head
    assert "tpwarden.watchdog.metrics_host" in wd.fix
    out = tmp_path / "prom.yml"
    res = CliRunner().invoke(app, ["prometheus", "config", "-i", str(EXAMPLE), "-o", str(out)])
    assert res.exit_code == 2 and not out.exists()
    assert "listens on loopback only" in res.output


def test_wildcard_listen_dials_the_inventory_address_and_env_key_warns(tmp_path):
    doc = _example()
    s = doc["all"]["vars"]["tpwarden"]
    s["thermal"] = {"metrics_host": "0.0.0.0"}
    s["watchdog"] = {**s.get("watchdog", {}), "metrics_host": "0.0.0.0"}
    s["host"] = "0.0.0.0"
    doc["all"]["children"]["workers"]["hosts"]["node3"]["tpwarden_thermal_metrics_port"] = 9511
    inv = tmp_path / "inv.yml"
    inv.write_text(_yaml_text(doc))
    res = CliRunner().invoke(
        app, ["prometheus", "config", "-i", str(inv), "--rules", "/r.yml", "--json"]
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    jobs = {j["job_name"]: j for j in out["config"]["scrape_configs"]}
    thermal = [g["targets"][0] for g in jobs["tpwarden-thermal"]["static_configs"]]
    assert thermal == ["10.0.0.11:9411", "10.0.0.12:9411", "10.0.0.13:9511", "10.0.0.14:9411"]
    assert jobs["tpwarden-watchdog"]["static_configs"][0]["targets"] == ["10.0.0.11:9410"]
    assert jobs["vllm"]["static_configs"][0]["targets"] == ["10.0.0.11:8000"]
    # the example's key lives in an env var: no token in the config, a warning with the fix
    assert "authorization" not in jobs["vllm"]
    (warn,) = [f for f in out["findings"] if f["job"] == "vllm"]
    assert "TPWARDEN_API_KEY" in warn["message"] and "--api-key-file" in warn["fix"]


def test_api_key_file_is_referenced_never_read(tmp_path):
    key = tmp_path / "api_key"
    key.write_text("s3cret-value\n")
    doc = inventory_doc(LabPaths(tmp_path / "lab"))
    doc["all"]["vars"]["tpwarden"]["secrets"]["api_key"] = {"file": str(key)}
    cfg = build_config(parse_inventory(_yaml_text(doc)), PromOptions(rules_path="/r.yml"))
    vllm = cfg.doc["scrape_configs"][2]
    assert vllm["authorization"] == {"type": "Bearer", "credentials_file": str(key)}
    assert "s3cret" not in render_yaml(cfg)
    other = build_config(
        parse_inventory(_yaml_text(doc)), PromOptions(rules_path="/r", api_key_file="/etc/k")
    )
    assert other.doc["scrape_configs"][2]["authorization"]["credentials_file"] == "/etc/k"


def test_per_host_thermal_address_reaches_the_agent_and_is_validated(tmp_path):
    spec = _lab_spec(tmp_path)
    node2 = spec.node("node2")
    argv = agent_argv(spec, node2)
    assert argv[argv.index("--metrics-host") + 1] == "127.0.0.12"
    assert argv[argv.index("--metrics-port") + 1] == "9411"
    doc = inventory_doc(LabPaths(tmp_path / "lab"))
    doc["all"]["children"]["workers"]["hosts"]["node2"]["tpwarden_thermal_metrics_port"] = 70000
    with pytest.raises(ConfigError, match="tpwarden_thermal_metrics_port"):
        parse_inventory(_yaml_text(doc))


def test_default_rules_named_only_when_installed(tmp_path):
    spec = _lab_spec(tmp_path)
    absent = build_config(spec, PromOptions(), rules_exists=lambda p: False)
    assert "rule_files" not in absent.doc
    assert [f.job for f in absent.warnings if f.job == "rule_files"] == ["rule_files"]
    present = build_config(spec, PromOptions(), rules_exists=lambda p: True)
    assert present.doc["rule_files"][0].endswith("monitoring/tpwarden-rules.yml")


def test_durations():
    assert (duration(2), duration(0.5), duration(15.0)) == ("2s", "500ms", "15s")
    with pytest.raises(ValueError):
        duration(0)
