"""tpwarden's own alerts in Alertmanager's webhook format (payload version 4), delivered to a
real HTTP receiver on 127.0.0.1; where the event is one a Prometheus rule also sees, the
alertname and severity are the rule's."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError
from tpwarden.cluster.settings import WatchdogSpec
from tpwarden.watchdog.alert import Alerter
from tpwarden.watchdog.alertmanager import CATEGORIES, NEVER, alert_identity, fingerprint
from tpwarden.watchdog.config import WatchdogConfig
from tpwarden.watchdog.monitoring_files import rules_path

RUNBOOK = Path(__file__).resolve().parents[2] / "docs" / "runbook.md"
T0 = 1_764_720_000.0  # 2025-12-03T00:00:00Z
GAVE_UP = {
    "at": T0 + 0.25,
    "probe_url": "http://10.0.0.1:8000",
    "incident_id": "inc-3-1764719000",
    "category": "gave_up",
    "message": "gave up restarting: boot failed; 2 boots in a row failed. Fix it, then `release`.",
    "phase": "given_up",
    "consecutive_failures": 3,
    "events_path": "/var/lib/tpwarden/watchdog/events.jsonl",
}


class Receiver:
    def __init__(self, status: int = 200) -> None:
        self.bodies: list[bytes] = []
        self.headers: list[dict[str, str]] = []
        self.status = status
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                n = int(self.headers["Content-Length"])
                receiver.bodies.append(self.rfile.read(n))
                receiver.headers.append(dict(self.headers))
                self.send_response(receiver.status)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def json(self, i: int = -1) -> Any:
        return json.loads(self.bodies[i])


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    r.thread.start()
    yield r
    r.server.shutdown()
    r.server.server_close()


def rule_labels() -> dict[str, dict[str, str]]:
    (group,) = yaml.safe_load(rules_path().read_text())["groups"]
    return {r["alert"]: r["labels"] for r in group["rules"]}


def test_gave_up_arrives_as_alertmanager_v4_payload(receiver: Receiver) -> None:
    alerter = Alerter(webhook=receiver.url, webhook_format="alertmanager", clock=lambda: T0 + 99)
    assert alerter.send(dict(GAVE_UP)) == []
    body = receiver.json()
    assert receiver.headers[0]["Content-Type"] == "application/json"
    assert set(body) == {
        "version", "groupKey", "truncatedAlerts", "status", "receiver", "groupLabels",
        "commonLabels", "commonAnnotations", "externalURL", "alerts",
    }  # fmt: skip
    assert (body["version"], body["status"], body["truncatedAlerts"]) == ("4", "firing", 0)
    assert body["receiver"] == "tpwarden-watchdog" and isinstance(body["externalURL"], str)
    (alert,) = body["alerts"]
    assert set(alert) == {
        "status", "labels", "annotations", "startsAt", "endsAt", "generatorURL", "fingerprint",
    }  # fmt: skip
    labels = alert["labels"]
    rule = rule_labels()["TpwardenWatchdogGaveUp"]
    assert labels["alertname"] == "TpwardenWatchdogGaveUp"
    assert labels["severity"] == rule["severity"] == "critical"
    assert labels["category"] == "gave_up" and labels["incident"] == "inc-3-1764719000"
    assert alert["status"] == "firing"
    assert alert["startsAt"] == "2025-12-03T00:00:00.250Z"  # when it was raised, not sent
    assert alert["endsAt"] == NEVER
    assert re.fullmatch(r"[0-9a-f]{16}", alert["fingerprint"])
    assert alert["fingerprint"] == fingerprint(labels)
    assert alert["annotations"]["summary"] == GAVE_UP["message"]
    assert "phase: given_up" in alert["annotations"]["description"]
    assert alert["annotations"]["runbook"] == "docs/runbook.md#watchdog-gave-up"
    assert body["groupLabels"] == {"alertname": "TpwardenWatchdogGaveUp"}
    assert body["commonLabels"] == labels
    assert body["commonAnnotations"] == alert["annotations"]
    assert body["groupKey"] == '{}:{alertname="TpwardenWatchdogGaveUp"}'


def test_default_format_is_tpwardens_incident_record(receiver: Receiver) -> None:
    assert Alerter(webhook=receiver.url).send(dict(GAVE_UP)) == []
    assert receiver.json() == GAVE_UP


def test_same_incident_same_fingerprint_other_incident_other(receiver: Receiver) -> None:
    alerter = Alerter(webhook=receiver.url, webhook_format="alertmanager")
    alerter.send(dict(GAVE_UP))
    alerter.send(dict(GAVE_UP))
    alerter.send(dict(GAVE_UP, incident_id="inc-4-1764729000"))
    prints = [receiver.json(i)["alerts"][0]["fingerprint"] for i in range(3)]
    assert prints[0] == prints[1] != prints[2]


def test_receiver_error_is_reported_not_raised(receiver: Receiver) -> None:
    receiver.status = 500
    problems = Alerter(webhook=receiver.url, webhook_format="alertmanager").send(dict(GAVE_UP))
    assert problems == ["alert webhook answered HTTP 500"]
    assert receiver.json()["version"] == "4"  # it did arrive, in the right format


def test_events_a_rule_also_sees_use_the_rules_name_and_severity() -> None:
    rules = rule_labels()
    shared = {c: n for c, (n, _, _) in CATEGORIES.items() if n in rules}
    assert shared == {
        "gave_up": "TpwardenWatchdogGaveUp",
        "budget_exhausted": "TpwardenWatchdogHeld",
        "misconfig": "TpwardenWatchdogBlind",
        "tick_errors": "TpwardenWatchdogTickErrors",  # the daemon's own, and the rule's
    }
    for category, name in shared.items():
        assert alert_identity(category)[1] == rules[name]["severity"], category


def test_every_runbook_link_resolves() -> None:
    headings = re.findall(r"^## (.+)$", RUNBOOK.read_text(), re.M)
    anchors = {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}
    for category in CATEGORIES:
        assert alert_identity(category)[2].partition("#")[2] in anchors, category
    assert alert_identity("something_new")[:2] == ("TpwardenWatchdogSomethingNew", "warning")


def test_fingerprint_is_prometheus_fnv1a() -> None:
    assert fingerprint({}) == "cbf29ce484222325"  # FNV-1a 64 offset basis: the empty label set
    assert fingerprint({"a": "b"}) != fingerprint({"a": "c"})


def test_format_is_configured_from_the_inventory_spec() -> None:
    spec = WatchdogSpec(
        alert_webhook="http://127.0.0.1:9/hook", alert_webhook_format="alertmanager"
    )
    cfg = WatchdogConfig.from_spec(spec, probe_url="http://127.0.0.1:8000")
    assert cfg.alert_webhook_format == "alertmanager"
    assert WatchdogConfig.from_spec(WatchdogSpec(), probe_url="http://x").alert_webhook_format == (
        "tpwarden"
    )
    with pytest.raises(ValidationError):
        WatchdogSpec(alert_webhook_format="slack")
    with pytest.raises(ValueError):
        Alerter(webhook="http://127.0.0.1:9/hook", webhook_format="slack")


def test_the_production_wiring_sends_the_configured_format(
    receiver: Receiver, tmp_path: Path
) -> None:
    from tpwarden.watchdog.daemon import build_watchdog

    spec = WatchdogSpec(alert_webhook=receiver.url, alert_webhook_format="alertmanager")
    cfg = WatchdogConfig.from_spec(spec, probe_url="http://127.0.0.1:9", state_dir=str(tmp_path))
    wd = build_watchdog(cfg, actuator=None)  # type: ignore[arg-type] - never restarts here
    assert wd._alerter.send(dict(GAVE_UP, category="misconfig")) == []
    labels = receiver.json()["alerts"][0]["labels"]
    assert (labels["alertname"], labels["severity"]) == ("TpwardenWatchdogBlind", "warning")
