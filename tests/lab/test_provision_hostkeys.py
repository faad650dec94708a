"""`tpwarden provision` refuses a node whose host key is not known (issue 29).

A copy of the lab inventory points Ansible's UserKnownHostsFile at a known_hosts that lacks
node2's line. A `--check` run of the cheapest tag (prereqs; the baseline probe still connects to
every node) must fail node2 as unreachable with ssh's host-key refusal, while the other three
nodes, whose keys are listed, connect. Nothing is installed (--check). Uses the session `lab`
and `source` fixtures.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from tpwarden.lab.paths import NODE_NAMES

from tests.lab.lane import node_ip

pytestmark = pytest.mark.lab

TPWARDEN = str(Path(sys.executable).parent / "tpwarden")
UNKNOWN = "node2"


def test_provision_refuses_a_node_whose_host_key_is_not_known(lab, source, tmp_path):
    known = lab.known_hosts.read_text().splitlines(keepends=True)
    kept = [line for line in known if line.split(" ", 1)[0] != node_ip(UNKNOWN)]
    assert len(kept) == len(known) - 1, known  # the lab lists node2 by its address
    partial = tmp_path / "known_hosts"
    partial.write_text("".join(kept))
    inv = yaml.safe_load(lab.inventory.read_text())
    lab_vars = inv["all"]["vars"]
    needle = f"UserKnownHostsFile={lab.known_hosts}"
    assert needle in lab_vars["ansible_ssh_common_args"]
    lab_vars["ansible_ssh_common_args"] = lab_vars["ansible_ssh_common_args"].replace(
        needle, f"UserKnownHostsFile={partial}"
    )
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump(inv, sort_keys=False))
    # A fresh ControlPath directory: an ssh master left open by an earlier test (ControlPersist)
    # would carry the connection without checking the key again.
    env = {**os.environ, "ANSIBLE_SSH_CONTROL_PATH_DIR": str(tmp_path / "cp")}
    argv = [TPWARDEN, "provision", "-i", str(inventory), "--source", str(source), "--json"]
    argv += ["--check", "--tags", "prereqs"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env)
    assert done.stdout.strip(), done.stderr[-3000:]
    doc = json.loads(done.stdout)
    assert done.returncode != 0 and not doc["ok"], doc
    hosts = {h["host"]: h for h in doc["hosts"]}
    assert hosts[UNKNOWN]["unreachable"] >= 1, doc
    refusals = [f for f in doc["failures"] if f["host"] == UNKNOWN]
    assert refusals and all(f["status"] == "unreachable" for f in refusals), doc
    assert "Host key verification failed" in refusals[0]["message"], refusals
    for node in NODE_NAMES:
        if node != UNKNOWN:
            assert hosts[node]["unreachable"] == 0, (node, doc)
