"""The lab lane this test run uses (TPWARDEN_LAB_LANE, default 1; issue 50): its node
addresses for tests that name a node's address themselves."""

from __future__ import annotations

from tpwarden.lab.paths import LabPaths


def node_ip(name: str) -> str:
    """node1 -> 127.0.0.11 in lane 1, 127.0.0.21 in lane 2 ..."""
    return LabPaths.from_env().node_ip(name)
