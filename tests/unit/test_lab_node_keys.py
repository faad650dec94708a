"""A lab node's boot keeps the keys provisioning authorized, as a real node's boot does.

`nodes.prepare` runs on every boot of a lab node. It used to rewrite root's authorized_keys with
the lab's key alone, so a node restarted after provisioning (tests/lab/test_provision.py's clock
cap test) refused the head watchdog's own key: a lab harsher than the field.
"""

from __future__ import annotations

from pathlib import Path

from tpwarden.lab.nodes import _authorize

LAB_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIlab tpwarden-lab\n"
WATCHDOG_KEY = 'restrict,command="/opt/tpwarden/bin/ssh-gate" ssh-ed25519 AAAAwd tpwarden-watchdog'


def test_a_first_boot_authorizes_the_lab_key_alone(tmp_path: Path) -> None:
    keys = tmp_path / "root" / ".ssh" / "authorized_keys"
    _authorize(keys, LAB_KEY)
    assert keys.read_text() == LAB_KEY
    assert keys.stat().st_mode & 0o777 == 0o600


def test_a_later_boot_keeps_what_provisioning_added(tmp_path: Path) -> None:
    keys = tmp_path / "authorized_keys"
    keys.write_text(LAB_KEY + WATCHDOG_KEY)  # no final newline, as an editor may leave it
    _authorize(keys, LAB_KEY)
    assert keys.read_text() == LAB_KEY + WATCHDOG_KEY
    keys.write_text(WATCHDOG_KEY)
    _authorize(keys, LAB_KEY)
    assert keys.read_text().splitlines() == [WATCHDOG_KEY, LAB_KEY.strip()]
