"""One operator identity (issue 31, item 3): `user@host`, the same name in a watchdog hold, its
event and the control side's records."""

from __future__ import annotations

import getpass
import json
import os
import socket
from pathlib import Path

from tpwarden.cluster.cli.watchdog import app
from tpwarden.cluster.hold import read_hold
from tpwarden.cluster.operator_lock import operator_identity
from typer.testing import CliRunner


def test_user_at_host() -> None:
    assert operator_identity(lambda: "ana", lambda: "desk") == "ana@desk"
    assert operator_identity() == f"{getpass.getuser()}@{socket.gethostname()}"


def test_a_user_without_a_name_is_its_uid() -> None:
    def nameless() -> str:
        raise KeyError("getpwuid(): uid not found: 4242")

    assert operator_identity(nameless, lambda: "desk") == f"{os.getuid()}@desk"


def test_a_watchdog_hold_names_the_operator_as_everyone_else_does(tmp_path: Path) -> None:
    sd = tmp_path / "wd"
    sd.mkdir()
    r = CliRunner()
    res = r.invoke(app, ["hold", "--state-dir", str(sd), "--for", "30m", "--reason", "x"])
    assert res.exit_code == 0, res.output
    hold, _ = read_hold(str(sd / "hold.json"))
    assert hold is not None and hold.by == operator_identity()
    assert r.invoke(app, ["release", "--state-dir", str(sd), "--by", "ci"]).exit_code == 0
    events = [json.loads(x) for x in (sd / "events.jsonl").read_text().splitlines()]
    assert [(e["kind"], e["by"]) for e in events] == [
        ("hold_set", operator_identity()),
        ("hold_released", "ci"),
    ]
