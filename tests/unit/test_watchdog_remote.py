"""Watchdog commands act where the watchdog runs (issue 30, item 4).

`watchdog hold -i` on the control machine used to write a local hold.json and say "restarts
held" while the watchdog on the head went on restarting. Now, without --state-dir, the command
runs on the watchdog host over SSH (faked here at the gateway: `run_on_watchdog_host`), or
here when the watchdog is here; a watchdog host that is neither is refused before anything.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from tpwarden.cluster.cli import app
from tpwarden.cluster.errors import ConfigError
from tpwarden.cluster.inventory.load import load_inventory
from tpwarden.cluster.operations import watchdog_host as watchdog_remote
from tpwarden.cluster.operations.watchdog_host import NODE_TPWARDEN, remote_argv, watchdog_place
from typer.testing import CliRunner

GOOD = Path(__file__).parent / "inventories" / "good.yml"


@pytest.fixture
def spec():
    return load_inventory(GOOD)


def test_the_head_by_default_and_a_named_node_are_reached_over_ssh(spec):
    place = watchdog_place(spec)
    assert (place.host, place.node) == (spec.head.name, spec.head)
    worker = spec.workers[0]
    place = watchdog_place(dataclasses.replace(spec, watchdog_host=worker.name))
    assert place.node == worker and place.describe() == f"{worker.name} (over SSH)"


def test_control_this_host_and_a_local_node_are_here(spec):
    assert watchdog_place(dataclasses.replace(spec, watchdog_host="control")).node is None
    here = dataclasses.replace(spec, watchdog_host="ops7")
    assert watchdog_place(here, hostname="ops7").node is None
    local_head = dataclasses.replace(spec.head, ssh_host="local")
    nodes = tuple(local_head if n is spec.head else n for n in spec.nodes)
    assert watchdog_place(dataclasses.replace(spec, nodes=nodes)).node is None


def test_a_watchdog_host_outside_the_inventory_is_refused(spec):
    with pytest.raises(ConfigError, match="runs on monitor9") as err:
        watchdog_place(dataclasses.replace(spec, watchdog_host="monitor9"), hostname="ops7")
    assert "--state-dir" in (err.value.hint or "")


def test_the_remote_command_names_the_watchdog_state_dir(spec):
    argv = remote_argv(spec, ("watchdog", "hold"), ["--for", "30m"])
    assert argv == [NODE_TPWARDEN, "watchdog", "hold", "--state-dir", spec.watchdog.state_dir,
                    "--for", "30m"]  # fmt: skip


@pytest.fixture
def remote(monkeypatch):
    """The SSH gateway faked: records each call, answers as the node's tpwarden would."""
    calls: list[tuple[str, str, list[str]]] = []
    answer = {"rc": 0, "out": "", "err": ""}

    def run(spec, node, command, args):
        calls.append((node.name, " ".join(command).removeprefix("watchdog "), list(args)))
        return answer["rc"], answer["out"], answer["err"]

    monkeypatch.setattr(watchdog_remote, "run_on_watchdog_host", run)
    return calls, answer


def _cli(*argv: str):
    return CliRunner().invoke(app, list(argv))


def test_hold_with_an_inventory_runs_on_the_head_and_relays_its_answer(remote, tmp_path):
    calls, answer = remote
    answer["out"] = "restarts held until 2026-12-04T10:00:00Z: k=3 rollout\n"
    result = _cli("watchdog", "hold", "--for", "30m", "--reason", "k=3 rollout", "-i", str(GOOD),
                  "--by", "ana@laptop")  # fmt: skip
    assert result.exit_code == 0, result.output
    assert calls == [("node1", "hold", ["--for", "30m", "--reason", "k=3 rollout", "--by",
                                        "ana@laptop"])]  # fmt: skip
    assert "restarts held until" in result.stdout
    assert not (tmp_path / "hold.json").exists()


def test_status_json_is_the_nodes_one_document_and_its_exit_code(remote):
    calls, answer = remote
    doc = {"schema_version": 1, "command": "watchdog status", "ok": False, "dry_run": True}
    answer.update(rc=1, out=json.dumps(doc) + "\n")
    result = _cli("watchdog", "status", "-i", str(GOOD), "--json")
    assert result.exit_code == 1
    assert json.loads(result.stdout) == doc
    assert calls == [("node1", "status", ["--json"])]


def test_history_and_release_pass_their_options(remote):
    calls, _ = remote
    assert _cli("watchdog", "history", "-i", str(GOOD), "--limit", "5", "--probes").exit_code == 0
    assert _cli("watchdog", "release", "-i", str(GOOD), "--by", "ana").exit_code == 0
    assert calls == [("node1", "history", ["--limit", "5", "--probes"]),
                     ("node1", "release", ["--by", "ana"])]  # fmt: skip


def test_no_tpwarden_on_the_node_says_provision(remote):
    _, answer = remote
    answer.update(rc=127, err="sh: 1: /opt/tpwarden/venv/bin/tpwarden: not found\n")
    result = _cli("watchdog", "status", "-i", str(GOOD))
    assert result.exit_code == 2
    assert "provision" in result.output and "Traceback" not in result.output


def test_a_bad_duration_or_an_explicit_state_dir_contacts_nothing(remote, tmp_path):
    calls, _ = remote
    bad = _cli("watchdog", "hold", "--for", "9d", "--reason", "x", "-i", str(GOOD))
    assert bad.exit_code == 2
    here = _cli("watchdog", "hold", "--for", "5m", "--reason", "x", "--state-dir", str(tmp_path))
    assert here.exit_code == 0, here.output
    assert (tmp_path / "hold.json").exists()
    assert calls == []


class _FakeSession:
    """`cluster.ssh.NodeSession` at the SFTP seam: files of a local directory as the node's."""

    def __init__(self, root: Path, remote_dir: str) -> None:
        self.root, self.remote_dir, self.got = root, remote_dir, []

    def _local(self, remote: str) -> Path:
        assert remote.startswith(self.remote_dir + "/"), remote
        return self.root / remote[len(self.remote_dir) + 1 :]

    def exists(self, remote: str) -> bool:
        return self._local(remote).is_file()

    def get(self, remote: str, local: str) -> None:
        self.got.append(remote)
        Path(local).write_bytes(self._local(remote).read_bytes())


def _fake_pool(session):
    """A pool for `watchdog_events(pool=...)`: `session` for every node, None: unreachable."""
    from tpwarden.cluster.ssh import gateway as ssh

    class Pool:
        def __init__(self, options):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return None

        def session(self, node):
            if session is None:
                raise ssh.NodeUnreachable(node.name, "SSH connect timed out")
            return session

    return Pool


def test_report_reads_the_event_log_where_the_watchdog_runs(spec, tmp_path):
    """`report -i` with the watchdog on node1 copies node1's events.jsonl (and the rotated
    part) over SFTP, never this machine's file of the same name."""
    node_dir = tmp_path / "node1"
    node_dir.mkdir()
    (node_dir / "events.jsonl").write_text('{"ts": 2, "kind": "probe"}\n')
    (node_dir / "events.jsonl.1").write_text('{"ts": 1, "kind": "probe"}\n')
    session = _FakeSession(node_dir, spec.watchdog.state_dir)
    dest = tmp_path / "copy"
    dest.mkdir()
    path, problem = watchdog_remote.watchdog_events(spec, dest, pool=_fake_pool(session))
    assert problem is None and path == dest / "events.jsonl"
    assert (dest / "events.jsonl.1").read_text() == '{"ts": 1, "kind": "probe"}\n'
    assert session.got == [f"{spec.watchdog.state_dir}/events.jsonl.1",
                           f"{spec.watchdog.state_dir}/events.jsonl"]  # fmt: skip


def test_an_unreachable_watchdog_host_is_a_named_problem(spec, tmp_path):
    path, problem = watchdog_remote.watchdog_events(spec, tmp_path, pool=_fake_pool(None))
    assert problem is not None and problem.startswith("node1: ") and "timed out" in problem
    assert not path.exists()


def test_incident_list_and_show_read_the_watchdog_hosts_dossiers(remote):
    calls, answer = remote
    answer["out"] = "no incident dossiers in /var/lib/tpwarden/watchdog/incidents\n"
    assert _cli("incident", "list", "-i", str(GOOD)).exit_code == 0
    assert _cli("incident", "show", "20261204T031500Z", "-i", str(GOOD), "--json").exit_code == 0
    assert calls == [("node1", "incident list", []),
                     ("node1", "incident show", ["20261204T031500Z", "--json"])]  # fmt: skip
