"""`tpwarden provision --remove` brings every node back to its listing from before the run's one
provisioning (tests/lab/provisioning.py): no tpwarden files, no tpwarden units.

Runs after tests/lab/test_provision.py and tests/lab/test_provision_head_watchdog.py, which
share that provisioning (pytest runs modules in name order), and before
tests/lab/test_provision_wheel.py, which expects the nodes unprovisioned. Uses the session `lab`
fixture.
"""

from __future__ import annotations

import pytest
from tpwarden.lab.paths import NODE_NAMES

from tests.lab.provisioning import describe, listing, provision, stop_head_watchdog

pytestmark = pytest.mark.lab


def test_remove_restores_nodes(lab, source, provisioned_lab):
    stop_head_watchdog(lab)
    doc = provision(lab, source, "--remove")
    provisioned_lab["removed"] = doc["exit"] == 0
    assert doc["exit"] == 0, describe(doc)
    after = {n: listing(lab, n) for n in NODE_NAMES}
    assert after == provisioned_lab["before"]
    for n in NODE_NAMES:
        units = lab.ssh(n, ["systemctl", "list-units", "--all", "--plain", "tpwarden*"]).stdout
        assert "tpwarden-" not in units, f"{n}: {units}"
