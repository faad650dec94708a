"""The lab provisioned once per run (issue 35): what the provisioning modules share.

`tpwarden provision` from a snapshot of the source, with the watchdog on node1, costs about
100 s. tests/lab/test_provision.py (install, idempotence, --check, services, clock cap) and
tests/lab/test_provision_head_watchdog.py (the head's own watchdog, the day-one walkthrough)
both need exactly that, so the session fixture `provisioned_lab` (tests/lab/conftest.py)
provisions once; tests/lab/test_provision_removal.py, which pytest runs after both (modules run
in name order), removes it and checks every node is back to its listing from before.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from pathlib import Path

from tpwarden.lab.paths import HEAD

TPWARDEN = str(Path(sys.executable).parent / "tpwarden")
LISTED = ["/opt", "/etc/systemd/system", "/var/lib/tpwarden", "/etc/tpwarden", "/var/log/tpwarden"]
WATCHDOG_UNIT = "tpwarden-watchdog.service"


def listing(lab, node: str) -> list[str]:
    done = lab.ssh(node, ["find", *LISTED, "-maxdepth", "3"])
    return sorted(done.stdout.split())


def provision(lab, source: Path, *args: str) -> dict:
    # The lab inventory keeps its watchdog on the control machine; here the unit on the head is
    # what is tested, so name the head as the watchdog host.
    extra = source / "watchdog-on-head.yml"
    extra.write_text("tpwarden_watchdog_host: node1\n")
    argv = [TPWARDEN, "provision", "-i", str(lab.inventory), "--source", str(source), "--json"]
    argv += ["-e", str(extra)]
    done = subprocess.run([*argv, *args], capture_output=True, text=True, timeout=600)
    assert done.stdout.strip(), done.stderr[-3000:]
    doc = json.loads(done.stdout)
    doc["exit"] = done.returncode
    return doc


def describe(doc: dict) -> str:
    return json.dumps(
        {k: doc.get(k) for k in ("status", "changed", "hosts", "failures", "artifact_dir")}
    )


def stop_head_watchdog(lab) -> None:
    """Never leave a watchdog on node1 that fights the later tests' own watchdogs."""
    with contextlib.suppress(Exception):
        lab.ssh(HEAD, ["systemctl", "disable", "--now", WATCHDOG_UNIT], timeout_s=60)
