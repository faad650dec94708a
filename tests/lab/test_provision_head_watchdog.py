"""The provisioned watchdog on the head node restarts a hung server with its OWN SSH identity.

`tpwarden provision` (watchdog host: node1) gives the watchdog a key of its own, authorized on
every node, and a known_hosts of every node's host keys; `tpwarden up` from this machine records
the applied plan on node1 (it names this machine's key and known_hosts, which node1 does not
have). The head's container is paused: node1's watchdog must count the failures, restart the
server over SSH with its own identity, and see it healthy again. Nothing on this machine takes
part in the restart (its own cluster-control log stays without one).

Uses the session `lab` fixture and the run's one provisioning, shared with
tests/lab/test_provision.py (tests/lab/provisioning.py); tests/lab/test_provision_removal.py
removes it after this module.
The lab inventory's watchdog settings are already scaled down (2 s interval and timeout, 3
failures, 120 s boot deadline) and reach the head's watchdog through the applied plan.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import subprocess
import time
from pathlib import Path

import pytest
from tpwarden.cluster.control.controller import Controller
from tpwarden.cluster.inventory.load import load_inventory
from tpwarden.cluster.operations.watchdog_host import NODE_TPWARDEN
from tpwarden.lab import faults
from tpwarden.lab.paths import HEAD, NODE_NAMES
from tpwarden.watchdog.actuator import WATCHDOG_WHO

from tests.lab.lane import node_ip
from tests.lab.provisioning import TPWARDEN, WATCHDOG_UNIT, stop_head_watchdog

from .waiting import poll

pytestmark = pytest.mark.lab

WD_DIR = "/etc/tpwarden/watchdog"  # tpwarden_watchdog_ssh_dir's default
UNIT = WATCHDOG_UNIT
# A loaded 2-core machine: 3 failures x (2 s + 2 s), the restart job (removal, pre-flight, four
# starts over SSH from node1) and the simulator's boot; generous, polled.
RESTART_DEADLINE_S = 240.0


@pytest.fixture
def provisioned(lab, provisioned_lab):
    """The lab provisioned with the watchdog on node1 (the run's one provisioning); the head's
    watchdog stopped again after each test."""
    doc = provisioned_lab["first"]
    assert doc["exit"] == 0 and doc["ok"], json.dumps(
        {k: doc.get(k) for k in ("status", "failures", "artifact_dir")}
    )
    try:
        yield doc
    finally:
        stop_head_watchdog(lab)


def _cat(lab, node: str, path: str) -> str:
    done = lab.ssh(node, ["cat", path], timeout_s=30)
    return done.stdout if done.rc == 0 else ""


def _json(lab, node: str, path: str) -> dict:
    with contextlib.suppress(ValueError):
        return json.loads(_cat(lab, node, path) or "{}")
    return {}  # being replaced (atomic rename) or not there yet


def _events(lab, state_dir: str) -> list[dict]:
    out = []
    for line in _cat(lab, HEAD, f"{state_dir}/events.jsonl").splitlines():
        with contextlib.suppress(ValueError):
            out.append(json.loads(line))
    return out


def _restarts_in(text: str) -> list[dict]:
    recs = []
    for line in text.splitlines():
        with contextlib.suppress(ValueError):
            rec = json.loads(line)
            if rec.get("event") == "restart":
                recs.append(rec)
    return recs


def _tpwarden(env: dict, *args: str, timeout_s: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [TPWARDEN, *args], capture_output=True, text=True, timeout=timeout_s, env=env
    )


def test_head_watchdog_restarts_a_hung_server_with_its_own_ssh_identity(lab, provisioned, tmp_path):
    spec = load_inventory(lab.inventory)
    sd = spec.watchdog.state_dir
    env = {**os.environ, "TPWARDEN_STATE_DIR": str(tmp_path / "control")}

    # 1. provisioning: a root-only key pair and known_hosts on node1, no inventory copy
    modes = lab.ssh(HEAD, ["stat", "-c", "%n %a %U", WD_DIR, f"{WD_DIR}/id_ed25519",
                           f"{WD_DIR}/known_hosts"])  # fmt: skip
    assert modes.rc == 0, modes.stderr
    assert modes.stdout.split("\n")[:3] == [
        f"{WD_DIR} 700 root", f"{WD_DIR}/id_ed25519 600 root", f"{WD_DIR}/known_hosts 600 root",
    ], modes.stdout  # fmt: skip
    assert lab.ssh(HEAD, ["test", "-e", "/etc/tpwarden/inventory.yml"]).rc != 0
    # node1's known_hosts holds what the lab's own (written from the nodes' keys) holds
    known = {ln for ln in _cat(lab, HEAD, f"{WD_DIR}/known_hosts").splitlines() if ln[:1] != "#"}
    ips = tuple(f"{node_ip(n)} " for n in NODE_NAMES)
    ours = {ln for ln in lab.known_hosts.read_text().splitlines() if ln.startswith(ips)}
    assert len(ours) >= len(NODE_NAMES) and ours <= known, known
    # the key opens every node from node1, host key checked against that file only, for what
    # the watchdog runs; its forced command (the SSH gate) refuses a shell command (issue 29)
    for node in NODE_NAMES:
        argv = ["ssh", "-i", f"{WD_DIR}/id_ed25519", "-o", f"UserKnownHostsFile={WD_DIR}/known_hosts",
                "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10",
                f"root@{node_ip(node)}"]  # fmt: skip
        done = lab.ssh(HEAD, [*argv, "test", "-d", "/etc/tpwarden"], timeout_s=30)
        assert done.rc == 0, (node, done.stdout, done.stderr)
        shell = lab.ssh(HEAD, [*argv, "hostname"], timeout_s=30)
        assert shell.rc == 126 and shell.stdout == "", (node, shell.stdout, shell.stderr)
        assert "tpwarden-ssh-gate: refused: 'hostname'" in shell.stderr, (node, shell.stderr)
    unit = lab.ssh(HEAD, ["systemctl", "cat", UNIT]).stdout
    assert f"--ssh-key {WD_DIR}/id_ed25519" in unit.replace('"', "")

    def active() -> bool:
        return lab.ssh(HEAD, ["systemctl", "is-active", UNIT]).stdout.strip() == "active"

    poll(active, 60, "node1's watchdog unit")

    # 2. an operator's down + up from this machine records the applied plan on node1
    with Controller(spec, state_dir=tmp_path / "probe") as ctl:
        try:
            done = _tpwarden(env, "down", "-i", str(lab.inventory), "--json")
            assert done.returncode == 0, done.stderr[-3000:]
            done = _tpwarden(env, "up", "-i", str(lab.inventory), "--json")
            assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
            applied = _json(lab, HEAD, f"{sd}/applied.json")
            assert applied.get("config_hash") == spec.config_hash(), applied.get("action")

            def follows_and_ready() -> bool:
                state = _json(lab, HEAD, f"{sd}/state.json").get("policy") or {}
                return state.get("phase") == "ready"

            try:
                poll(follows_and_ready, 120, "node1's watchdog to follow the plan, ready")
            except AssertionError:
                journal = lab.ssh(HEAD, ["journalctl", "-u", UNIT, "-n", "80", "--no-pager"])
                state = _cat(lab, HEAD, f"{sd}/state.json")[-1500:]
                raise AssertionError(
                    f"node1's watchdog not ready; state: {state}; journal: {journal.stdout}"
                ) from None

            # 3. hang the API: node1's watchdog restarts it, over SSH with its own key
            t_fault = time.time()
            faults.container_action(lab.paths, HEAD, "pause")
            ends: list[dict] = []

            def restarted() -> bool:
                evs = [e for e in _events(lab, sd) if e.get("ts", 0) >= t_fault]
                ends[:] = [e for e in evs if e.get("kind") == "restart_end"]
                if ends and not ends[0].get("ok"):
                    tail = [{k: v for k, v in e.items() if k != "evidence"} for e in evs[-8:]]
                    pytest.fail(f"the head's watchdog failed to restart: {ends[0]}; {tail}")
                return bool(ends)

            try:
                poll(restarted, RESTART_DEADLINE_S, "node1's watchdog to restart the server")
            except AssertionError:
                tail = [
                    {k: v for k, v in e.items() if k != "evidence"} for e in _events(lab, sd)[-12:]
                ]
                journal = lab.ssh(HEAD, ["journalctl", "-u", UNIT, "-n", "60", "--no-pager"])
                raise AssertionError(
                    f"no restart; events: {tail}; journal: {journal.stdout}"
                ) from None

            # the restart job ran in a transient scope of its own, outside the watchdog unit's
            # cgroup (issue 29 item 4): systemd logged the scope's start
            journal = lab.ssh(HEAD, ["journalctl", "--no-pager", "-b", "-o", "cat",
                                     "--since", f"@{int(t_fault) - 5}"], timeout_s=60)  # fmt: skip
            assert "tpwarden watchdog restart job" in journal.stdout, journal.stdout[-3000:]
            poll(lambda: ctl.probe(timeout=5)[0], 180, "the server healthy again")
            poll(follows_and_ready, 120, "node1's watchdog ready again")

            # 4. who restarted: the head's watchdog (node1's cluster-control log and its applied
            # plan say so); this machine's cluster-control log has no restart at all
            head_log = _cat(lab, HEAD, f"{sd}/control/events.jsonl")
            assert [r["who"] for r in _restarts_in(head_log)] == [WATCHDOG_WHO], head_log[-2000:]
            again = _json(lab, HEAD, f"{sd}/applied.json")
            assert (again.get("action"), again.get("by")) == ("restart", WATCHDOG_WHO), again
            assert again.get("config_hash") == spec.config_hash()
            # ... through the SSH gate: node2's auth log has the Docker API stream it let pass
            gate_log = lab.ssh("node2", ["journalctl", "--no-pager", "-o", "cat",
                                         "-t", "tpwarden-ssh-gate", "--since",
                                         f"@{int(t_fault) - 5}"], timeout_s=60)  # fmt: skip
            assert "allowed from" in gate_log.stdout, gate_log.stdout[-2000:] + gate_log.stderr
            assert "docker system dial-stdio" in gate_log.stdout, gate_log.stdout[-2000:]
            assert "refused" not in gate_log.stdout, gate_log.stdout[-2000:]
            here = tmp_path / "control" / "events.jsonl"
            assert not _restarts_in(here.read_text() if here.exists() else "")
        finally:
            stop_head_watchdog(lab)
            _leave_healthy(ctl, lab)


def _leave_healthy(ctl: Controller, lab) -> None:
    """As tests/lab/test_watchdog_scenarios.py leaves it: no fault, a healthy server."""
    with contextlib.suppress(Exception):
        faults.container_action(lab.paths, HEAD, "unpause")
    if not ctl.probe(timeout=5)[0]:
        result = ctl.restart("test cleanup", timeout_s=300)
        assert result.ok, (result.outcomes, result.boot and result.boot.reason)


@pytest.fixture
def head_inventory(lab, tmp_path) -> Path:
    """The lab inventory with the watchdog on node1, as provisioned above (a private copy)."""
    import yaml  # deferred: only these tests write an inventory

    doc = yaml.safe_load(lab.inventory.read_text())
    doc["all"]["vars"]["tpwarden_watchdog_host"] = HEAD
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump(doc, sort_keys=False))
    return inventory


def test_hold_from_this_machine_holds_the_watchdog_on_the_head(
    lab, provisioned, head_inventory, tmp_path
):
    """Issue 30 item 4: `watchdog hold -i` from the control machine, with the inventory naming
    node1 as the watchdog host, holds node1's watchdog (its own `watchdog status` on node1 shows
    the hold); `status -i` and `release -i` run there too."""
    inventory = head_inventory
    sd = load_inventory(inventory).watchdog.state_dir
    env = {**os.environ, "TPWARDEN_STATE_DIR": str(tmp_path / "control")}
    node_status = [NODE_TPWARDEN, "watchdog", "status", "--state-dir", sd, "--json"]
    try:
        done = _tpwarden(env, "watchdog", "hold", "-i", str(inventory), "--for", "10m",
                         "--reason", "lab hold from control", "--by", "lab-test")  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        assert "restarts held until" in done.stdout
        there = json.loads(lab.ssh(HEAD, node_status, timeout_s=60).stdout)
        assert there["hold"]["reason"] == "lab hold from control", there["hold"]
        assert there["hold"]["by"] == "lab-test"
        seen = _tpwarden(env, "watchdog", "status", "-i", str(inventory), "--json")
        assert json.loads(seen.stdout)["hold"]["reason"] == "lab hold from control", seen.stderr
    finally:
        done = _tpwarden(env, "watchdog", "release", "-i", str(inventory), "--by", "lab-test")
    assert done.returncode == 0, done.stdout + done.stderr
    there = json.loads(lab.ssh(HEAD, node_status, timeout_s=60).stdout)
    assert there["hold"] is None, there["hold"]


DAY_ONE = Path(__file__).resolve().parents[2] / "docs" / "real-cluster.md"


def day_one_commands() -> list[str]:
    """Every command line of docs/real-cluster.md's `sh` blocks, in order, comments off."""
    out = []
    for block in re.findall(r"```sh\n(.*?)```", DAY_ONE.read_text(), re.S):
        for line in block.splitlines():
            line = line.split("  #")[0].strip()
            if line and not line.startswith("#"):
                out.append(line)
    return out


@pytest.mark.timeout(1500)  # 18 commands: provision, a sweep, a measured rollout, a rollback
def test_day_one_walkthrough_runs_as_written(lab, provisioned, head_inventory, tmp_path):
    """Issue 28 item 8: docs/real-cluster.md, run. The install lines are the README's (run by
    tests/lab/test_provision_wheel.py); every other line is a `tpwarden` command, run in the
    page's order against the lab inventory (watchdog on node1, as provisioned) and must exit 0."""
    from tests.lab.test_provision_wheel import readme_install_lines

    commands = day_one_commands()
    install = [c for c in commands if not c.startswith("tpwarden ")]
    assert install == readme_install_lines(), install
    env = {**os.environ, "TPWARDEN_STATE_DIR": str(tmp_path / "control"),
           "TPWARDEN_RUNS_DIR": str(tmp_path / "runs")}  # fmt: skip
    ran = []
    try:
        for command in commands[len(install) :]:
            argv = [str(head_inventory) if a == "inv.yml" else a for a in shlex.split(command)]
            done = subprocess.run([TPWARDEN, *argv[1:]], capture_output=True, text=True,
                                  timeout=900, env=env, cwd=tmp_path)  # fmt: skip
            ran.append(command)
            assert done.returncode == 0, f"{command}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        assert (tmp_path / "night.html").stat().st_size > 0
    finally:
        stop_head_watchdog(lab)
    assert len(ran) >= 17, ran
