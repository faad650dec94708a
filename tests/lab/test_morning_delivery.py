"""The morning report arrives by webhook at its scheduled minute (issue 31 item 6).

The production wiring (`build_watchdog`: real prober and actuator, the APScheduler daily
delivery) watches the lab's server; `tpwarden.report` asks for the report at the next whole
minute in Asia/Seoul, and a receiver on 127.0.0.1 records when the POST arrives. The probe
interval is the lab's scaled one (1.5 s); the delivery minute is a real one (a wait of 15 to 75
s), because the cron computation is what is under test. The watchdog runs on the test host, so
the nodes' thermal files are not there: the payload must say so in `missing`.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from tpwarden.cluster.control.controller import Controller
from tpwarden.cluster.inventory.load import load_inventory
from tpwarden.watchdog.config import ReportConfig

from tests.lab.test_watchdog_scenarios import events, kinds, make_watchdog

pytestmark = pytest.mark.lab
ZONE = "Asia/Seoul"


@pytest.fixture
def server(lab, tmp_path, monkeypatch) -> Iterator[Controller]:
    monkeypatch.setenv("TPWARDEN_STATE_DIR", str(tmp_path / "control"))
    with Controller(load_inventory(lab.inventory), state_dir=tmp_path / "control") as c:
        result = c.up(timeout_s=300)
        assert result.ok, (result.outcomes, result.boot and result.boot.reason)
        yield c


def _receiver() -> tuple[ThreadingHTTPServer, list[tuple[float, dict[str, Any]]], threading.Event]:
    got: list[tuple[float, dict[str, Any]]] = []
    arrived = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            got.append((time.time(), body))
            self.send_response(200)
            self.end_headers()
            if body.get("category") == "morning_report":
                arrived.set()

        def log_message(self, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, got, arrived


@pytest.mark.timeout(300)
def test_morning_report_arrives_by_webhook_at_its_minute(server, tmp_path) -> None:
    httpd, got, arrived = _receiver()
    due = math.floor(time.time() / 60) * 60 + 60
    if due - time.time() < 15:  # room for the watchdog to start and probe first
        due += 60
    at = datetime.fromtimestamp(due, ZoneInfo(ZONE)).strftime("%H:%M")
    nodes = tuple(n.name for n in server.spec.nodes)
    report = ReportConfig(
        deliver_at=at, tz=ZONE, window_h=1, thermal_dir=server.spec.thermal.dir, nodes=nodes
    )
    url = f"http://127.0.0.1:{httpd.server_port}/hook"
    wd = make_watchdog(server.spec, tmp_path, alert_command=None, alert_webhook=url, report=report)
    wd.start()
    try:
        assert arrived.wait(due - time.time() + 30), f"no report by {at} {ZONE}: {got}"
    finally:
        wd.stop()
        httpd.shutdown()
    ((received_at, body),) = [(t, b) for t, b in got if b.get("category") == "morning_report"]
    assert 0 <= received_at - due < 10, (received_at, due)  # at its minute, not a tick later
    window = body["window"]
    assert window["tz"] == ZONE and abs(window["until"] - due) < 10
    assert window["until_local"][11:16] == at and window["hours"] == 1
    assert body["report"]["watchdog"]["probes"] >= 1, body["headline"]
    assert body["headline"] in body["message"]
    have = {n["node"] for n in body["report"]["thermal"]["nodes"] if n["samples_received"]}
    if have != set(nodes):  # the nodes' thermal files are on the nodes, not on this host
        assert "thermal" in body["missing"], body["missing"]
    evs = events(wd)
    assert kinds(evs, "morning_report")
    sent = [e for e in kinds(evs, "alert_sent") if e.get("category") == "morning_report"]
    assert sent and sent[0]["delivered"] is True, sent
