"""The shipped alert rules: valid for Prometheus 2.42 (`promtool check rules`), behaving as their
unit tests say (`promtool test rules`: each alert firing and, for the near misses, not firing),
named as the metrics contract says, and naming only metrics that tpwarden or vLLM export."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from tpwarden.watchdog.monitoring_files import rules_path

from tests.unit.monitoring_names import known_metric_names, metric_names_in, unknown_names

REPO = Path(__file__).resolve().parents[2]
RULE_TESTS = REPO / "tests" / "monitoring" / "tpwarden-rules.test.yml"
RUNBOOK = REPO / "docs" / "runbook.md"
CONTRACT_ALERTS = {
    "TpwardenServerHung",
    "TpwardenWatchdogGaveUp",
    "TpwardenWatchdogHeld",
    "TpwardenWatchdogBlind",
    "TpwardenWatchdogDown",
    "TpwardenWatchdogProbesStopped",
    "TpwardenWatchdogTickErrors",
    "TpwardenNodeNearCritical",
    "TpwardenGpuThermalThrottle",
    "TpwardenThermalSampleGap",
    "TpwardenUnifiedMemoryHigh",
    "TpwardenCanarySlowdown",
}


def promtool() -> str:
    found = shutil.which("promtool") or "/usr/bin/promtool"
    assert Path(found).exists(), (
        "promtool is missing: scripts/setup.sh installs Debian's prometheus"
    )
    return found


def run_promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool(), *args], capture_output=True, text=True, timeout=120, cwd=REPO, check=False
    )


def rules() -> list[dict]:
    (group,) = yaml.safe_load(rules_path().read_text())["groups"]
    assert group["name"] == "tpwarden"
    return group["rules"]


def test_promtool_check_rules() -> None:
    done = run_promtool("check", "rules", str(rules_path()))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(CONTRACT_ALERTS)} rules found" in done.stdout


def test_promtool_rule_unit_tests_pass() -> None:
    done = run_promtool("test", "rules", str(RULE_TESTS))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_promtool_rule_tests_can_fail(tmp_path: Path) -> None:
    # The unit tests are not vacuous: the hung alert with `>=` turned into `>` misses one failure
    broken = (
        rules_path().read_text().replace("consecutive_failures >= 1", "consecutive_failures > 1")
    )
    (tmp_path / "rules.yml").write_text(broken)
    tests = RULE_TESTS.read_text().replace(
        "../../watchdog/monitoring/tpwarden-rules.yml", str(tmp_path / "rules.yml")
    )
    (tmp_path / "t.test.yml").write_text(tests)
    done = run_promtool("test", "rules", str(tmp_path / "t.test.yml"))
    assert done.returncode != 0 and "TpwardenServerHung" in done.stdout + done.stderr


def test_alert_names_labels_and_annotations_follow_the_contract() -> None:
    found = {r["alert"]: r for r in rules()}
    assert set(found) == CONTRACT_ALERTS
    anchors = {_slug(h) for h in re.findall(r"^## (.+)$", RUNBOOK.read_text(), re.M)}
    for name, rule in found.items():
        assert rule["labels"]["severity"] in {"critical", "warning"}, name
        assert set(rule["annotations"]) == {"summary", "description", "runbook"}, name
        page, _, anchor = rule["annotations"]["runbook"].partition("#")
        assert page == "docs/runbook.md" and anchor in anchors, (name, anchor)
    assert "for" not in found["TpwardenNodeNearCritical"]  # fires within two evaluations
    assert found["TpwardenServerHung"]["for"] == "30s"
    assert found["TpwardenServerHung"]["labels"]["severity"] == "critical"


def test_every_alert_is_unit_tested_firing() -> None:
    tests = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    fired = {
        case["alertname"]
        for t in tests
        for case in t.get("alert_rule_test", [])
        if case.get("exp_alerts")
    }
    assert fired == CONTRACT_ALERTS


def test_every_metric_in_the_rules_is_exported() -> None:
    missing = unknown_names([r["expr"] for r in rules()], known_metric_names())
    assert not missing, f"rules name metrics nothing exports: {missing}"


def test_metric_names_in_reads_promql() -> None:
    expr = (
        'max by (node) (up{job="x"} == 0 or (time() - a_b) > 3 / rate(c_total[1h]))'
        " and on (job) group_left () vllm:num_requests_running offset 5m"
    )
    assert metric_names_in(expr) == {"up", "a_b", "c_total", "vllm:num_requests_running"}
    assert metric_names_in("label_values(tpwarden_x, node)") == {"tpwarden_x"}
    assert metric_names_in("rate(m[$__rate_interval]) * 1e3") == {"m"}


def _slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


@pytest.mark.parametrize(
    ("heading", "slug"),
    [("Requests hang, but /health says 200", "requests-hang-but-health-says-200")],
)
def test_slug(heading: str, slug: str) -> None:
    assert _slug(heading) == slug
