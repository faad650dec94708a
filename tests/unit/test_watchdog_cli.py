"""`tpwarden watchdog status/hold/release/history` against a state dir written by a real daemon."""

from __future__ import annotations

import json
from pathlib import Path

from tpwarden.cluster.cli.watchdog import app, parse_duration
from tpwarden.cluster.hold import read_hold
from typer.testing import CliRunner

from tests.unit.test_watchdog_daemon import REFUSED, make  # noqa: I001


def test_parse_duration() -> None:
    assert parse_duration("30m") == 1800 and parse_duration("1h30m") == 5400


def test_status_hold_release_history(tmp_path: Path) -> None:
    wd, prober, _ = make(tmp_path)
    wd.tick()
    prober.next = REFUSED
    wd.tick()
    wd.close()
    sd = wd.config.state_dir
    r = CliRunner()
    out = r.invoke(app, ["status", "--state-dir", sd, "--json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert doc["state"]["phase"] == "suspect" and doc["state"]["consecutive_failures"] == 1
    assert (
        r.invoke(app, ["hold", "--state-dir", sd, "--for", "30m", "--reason", "x"]).exit_code == 0
    )
    hold, _ = read_hold(wd.config.hold_path)
    assert hold is not None and hold.reason == "x"
    assert (
        r.invoke(app, ["hold", "--state-dir", sd, "--for", "30d", "--reason", "x"]).exit_code == 2
    )
    assert r.invoke(app, ["release", "--state-dir", sd]).exit_code == 0
    assert read_hold(wd.config.hold_path)[0] is None
    out = r.invoke(app, ["history", "--state-dir", sd, "--json"])
    kinds = [e["kind"] for e in json.loads(out.output)["events"]]
    assert "hold_set" in kinds and "hold_released" in kinds and "probe" not in kinds
