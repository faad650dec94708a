"""`tpwarden prometheus rules --time-scale` (issue 50): the shipped rules with every `for:` and
range window scaled, still valid for Prometheus's own checker."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
import yaml
from tpwarden.cluster.errors import ConfigError
from tpwarden.watchdog.monitoring_files import rules_path
from tpwarden.watchdog.rule_scale import (
    format_duration,
    parse_duration,
    scale_expr,
    scale_rules,
)


def _rules(text: str) -> dict[str, dict]:
    doc = yaml.safe_load(text)
    return {r["alert"]: r for g in doc["groups"] for r in g["rules"]}


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30s", 30), ("2m", 120), ("1h30m", 5400), ("1500ms", 1.5), ("1d", 86400), ("1w", 604800)],
)
def test_durations_parse(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("bad", ["", "2", "m", "1.5m", "2 m", "-1s"])
def test_not_a_duration(bad):
    with pytest.raises(ConfigError):
        parse_duration(bad)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(30, "30s"), (120, "2m"), (5400, "90m"), (7200, "2h"), (7.5, "7500ms"), (0.0001, "1ms")],
)
def test_durations_format_exactly(seconds, text):
    assert format_duration(seconds) == text
    assert parse_duration(text) == pytest.approx(max(seconds, 0.001))


def test_ranges_in_expressions_scale_and_keep_a_floor():
    expr = "sum(increase(x[2m])) == 0 and rate(y[1h]) > 0 and max_over_time(z[10m:1m]) > 1"
    assert scale_expr(expr, 0.25, 8) == (
        "sum(increase(x[30s])) == 0 and rate(y[15m]) > 0 and max_over_time(z[150s:1m]) > 1"
    )
    assert scale_expr("increase(x[20s])", 0.1, 8) == "increase(x[8s])"  # never below the floor


def test_the_shipped_rules_scaled():
    shipped = rules_path().read_text()
    scaled = scale_rules(shipped, 0.25, 8)
    before, after = _rules(shipped), _rules(scaled)
    assert before.keys() == after.keys()
    hung = after["TpwardenServerHung"]
    assert hung["for"] == "7500ms"  # 30s x 0.25
    assert "increase(vllm:generation_tokens_total[30s])" in hung["expr"]
    for name, rule in before.items():
        if "for" in rule:
            assert parse_duration(after[name]["for"]) == pytest.approx(
                parse_duration(rule["for"]) * 0.25
            ), name
        else:
            assert "for" not in after[name], name
        assert after[name]["labels"] == rule["labels"]
        assert after[name]["annotations"] == rule["annotations"]
    assert scaled.startswith("# tpwarden's alert rules with every `for:` and range window x0.25")


def test_a_scale_of_one_changes_no_window():
    shipped = rules_path().read_text()
    before, after = _rules(shipped), _rules(scale_rules(shipped, 1.0))
    assert before == after


@pytest.mark.parametrize("scale", [0, -1, float("nan"), float("inf")])
def test_the_scale_must_be_positive(scale):
    with pytest.raises(ConfigError):
        scale_rules(rules_path().read_text(), scale)


def test_scaled_rules_pass_promtool_and_the_cli_writes_them(tmp_path):
    promtool = shutil.which("promtool") or "/usr/bin/promtool"
    out = tmp_path / "rules.yml"
    done = subprocess.run(
        [sys.executable, "-m", "tpwarden.cluster.cli", "prometheus", "rules",
         "--time-scale", "0.25", "--min-range", "8", "-o", str(out)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert out.read_text() == scale_rules(rules_path().read_text(), 0.25, 8)
    check = subprocess.run([promtool, "check", "rules", str(out)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    shipped = len(_rules(rules_path().read_text()))  # every shipped rule, none lost
    assert shipped >= 12 and f"SUCCESS: {shipped} rules found" in check.stdout
