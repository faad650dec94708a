"""hold.json has one owner: `hold.hold_path` names it, `hold.hold_document` shapes it, and
every writer (the CLI's `write_hold`, a rollout's `WatchdogHolder`, here and on the head node)
writes the same bytes through `durable`."""

from __future__ import annotations

import dataclasses
import posixpath
from pathlib import Path
from typing import Any

from tpwarden.cluster.durable import json_bytes
from tpwarden.cluster.hold import hold_path, read_hold, write_hold, write_release
from tpwarden.cluster.inventory.load import load_inventory
from tpwarden.cluster.rollout.ports import WatchdogHolder
from tpwarden.cluster.ssh.gateway import NodeSession

from .fake_controller import FakeController

ROOT = Path(__file__).resolve().parents[2]


class FakeSession:
    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}

    def run(self, argv: list[str], **_: Any) -> Any:
        return type("Result", (), {"rc": 0})()

    def put_atomic(self, data: bytes, remote: str, mode: int = 0o600, **_: Any) -> None:
        self.files[remote] = data


def test_rollout_hold_writes_what_the_cli_writes_here_and_on_the_head(tmp_path: Path) -> None:
    spec = load_inventory(ROOT / "inventory.example.yml")
    wd_dir = tmp_path / "wd"
    wd_dir.mkdir()
    spec = dataclasses.replace(
        spec, watchdog=spec.watchdog.model_copy(update={"state_dir": str(wd_dir)})
    )
    head = FakeSession()
    control = FakeController.factory(head=head)
    holder = WatchdogHolder(spec, by="ops", controller=control, clock=lambda: 100.0)
    assert holder.path == hold_path(str(wd_dir)) == str(wd_dir / "hold.json")

    holder.hold("k=3 rollout", until=700.0, kind="down")
    here = (wd_dir / "hold.json").read_bytes()
    assert head.files[holder.path] == here
    cli = tmp_path / "cli-hold.json"
    write_hold(str(cli), until=700.0, reason="k=3 rollout", by="ops", now=100.0, kind="down")
    assert cli.read_bytes() == here
    hold, _ = read_hold(holder.path)
    assert hold is not None and (hold.until, hold.kind, hold.by) == (700.0, "down", "ops")

    holder.release()
    write_release(str(cli), by="ops", now=100.0)
    assert (wd_dir / "hold.json").read_bytes() == cli.read_bytes()
    assert (
        json_bytes({"hold": None, "released_at": 100.0, "released_by": "ops"}) == cli.read_bytes()
    )
    assert read_hold(holder.path) == (None, 100.0)


def test_put_atomic_renames_a_unique_hidden_temp_into_place() -> None:
    calls: list[tuple[Any, ...]] = []
    session = object.__new__(NodeSession)  # no connection: only the two calls it makes
    session.put_bytes = lambda data, remote, mode: calls.append(("put", remote, mode))  # type: ignore[method-assign]
    session.run = lambda argv, **kw: calls.append(("run", argv, kw))  # type: ignore[method-assign]
    for _ in range(2):
        session.put_atomic(b"{}\n", "/var/lib/tpwarden/watchdog/hold.json")
    temps = [c[1] for c in calls if c[0] == "put"]
    assert len(set(temps)) == 2
    for tmp in temps:
        directory, name = posixpath.split(tmp)
        assert directory == "/var/lib/tpwarden/watchdog"
        assert name.startswith(".hold.json.") and name.endswith(".tmp")
    runs = [c for c in calls if c[0] == "run"]
    assert [r[1] for r in runs] == [
        ["mv", "-f", t, "/var/lib/tpwarden/watchdog/hold.json"] for t in temps
    ]
    assert all(r[2]["check"] for r in runs)
