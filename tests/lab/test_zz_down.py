"""``lab down`` leaves the host as it was; ``lab up`` again is fast (cached)."""

from __future__ import annotations

import pytest
from tpwarden.lab import host
from tpwarden.lab import lab as lablib
from tpwarden.lab import prometheus as labprom

pytestmark = pytest.mark.lab


def test_up_twice_is_harmless(lab):
    seconds = lab.up()
    assert lablib.status(lab.paths).up
    print(f"cached lab up (already running): {seconds:.1f} s")


def test_down_restores_the_host_and_up_again_is_cached(lab):
    up_snapshot = lab.snapshot()
    assert up_snapshot["listeners"] and up_snapshot["mounts"] and up_snapshot["processes"]
    prom = labprom.status(lab.paths)
    assert prom.running and any(prom.listen in line for line in up_snapshot["listeners"])
    assert any("/usr/bin/prometheus" in p for p in up_snapshot["processes"])
    lab.down()
    after = lab.snapshot()
    for kind, lines in after.items():
        assert lines <= lab.before_up.get(kind, set()), (kind, lines)
    st = lablib.status(lab.paths)
    assert not any(n.running or n.ssh_open for n in st.nodes) and not st.sensord_running
    prom_host, prom_port = prom.listen.rsplit(":", 1)
    assert not st.prometheus["running"] and not host.tcp_open(prom_host, int(prom_port))
    seconds = lab.up()  # restore the session's lab for any later test
    print(f"first lab up: {lab.first_up_s:.1f} s; cached lab up from down: {seconds:.1f} s")
    assert lablib.status(lab.paths).up
