"""hold.json has one owner: `hold.hold_path` names it, `hold.hold_document` shapes it, and one
writer, `operations.watchdog_hold.WatchdogHold` (the CLI's `watchdog hold`, a rollout's or a
restart's lease, `down`), writes the same bytes through `durable`, here, or on the watchdog's
host by running the same command there."""

from __future__ import annotations

import dataclasses
import json
import posixpath
from pathlib import Path
from typing import Any

from tpwarden.cluster.cli import app
from tpwarden.cluster.durable import json_bytes
from tpwarden.cluster.hold import hold_path, read_hold, write_hold, write_release
from tpwarden.cluster.inventory.load import load_inventory
from tpwarden.cluster.operations import watchdog_host
from tpwarden.cluster.operations.watchdog_hold import WatchdogHold
from tpwarden.cluster.ssh.gateway import NodeSession
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[2]


def test_rollout_hold_writes_what_the_cli_writes(tmp_path: Path) -> None:
    wd_dir = tmp_path / "wd"
    wd_dir.mkdir()
    holder = WatchdogHold.here(str(wd_dir), by="ops", clock=lambda: 100.0)
    assert holder.path == hold_path(str(wd_dir)) == str(wd_dir / "hold.json")

    holder.hold("k=3 rollout", until=700.0, kind="down")
    here = (wd_dir / "hold.json").read_bytes()
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
    events = [json.loads(x) for x in (wd_dir / "events.jsonl").read_text().splitlines()]
    assert [(e["kind"], e["by"], e.get("hold_kind")) for e in events] == [
        ("hold_set", "ops", "down"),
        ("hold_released", "ops", None),
    ]


def test_a_renewal_extends_the_hold_without_a_second_event(tmp_path: Path) -> None:
    now = [100.0]
    holder = WatchdogHold.here(str(tmp_path), by="ops", clock=lambda: now[0])
    holder.hold("rollout 1", until=700.0)
    now[0] = 300.0
    holder.hold("rollout 1", until=900.0)  # the lease renewed
    assert read_hold(holder.path)[0].until == 900.0
    holder.hold("rollout 2", until=950.0)  # another hold: its own event
    kinds = [json.loads(x)["reason"] for x in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert kinds == ["rollout 1", "rollout 2"]


def test_on_the_head_the_same_command_writes_it_there(tmp_path: Path, monkeypatch) -> None:
    """The watchdog on the head: the hold is the `watchdog hold` command run there, which
    writes through the same writer (here: run against another directory as the head's)."""
    spec = load_inventory(ROOT / "inventory.example.yml")
    spec = dataclasses.replace(spec, watchdog_host=spec.head.name)
    sent: list[tuple[str, tuple[str, ...], list[str]]] = []
    head_dir = tmp_path / "head"
    head_dir.mkdir()

    def run(spec: Any, node: Any, command: tuple[str, ...], args: list[str]):
        sent.append((node.name, tuple(command), list(args)))
        done = CliRunner().invoke(app, [*command, "--state-dir", str(head_dir), *args])
        return done.exit_code, done.stdout, done.stderr

    monkeypatch.setattr(watchdog_host, "run_on_watchdog_host", run)
    holder = WatchdogHold.of(spec, by="ops", clock=lambda: 100.0)
    holder.hold("k=3 rollout", until=700.0, kind="down")
    assert sent == [(spec.head.name, ("watchdog", "hold"),
                     ["--for", "600s", "--reason", "k=3 rollout", "--by", "ops", "--kind", "down"])]  # fmt: skip
    hold, _ = read_hold(str(head_dir / "hold.json"))
    assert hold is not None and (hold.reason, hold.kind, hold.by) == ("k=3 rollout", "down", "ops")
    holder.release()
    assert sent[-1] == (spec.head.name, ("watchdog", "release"), ["--by", "ops"])
    assert read_hold(str(head_dir / "hold.json"))[0] is None
    assert not (tmp_path / "hold.json").exists()  # nothing written on this machine


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
