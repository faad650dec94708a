"""The cgroup freezer as this host's kernel and Docker engine run it (issue 32): `docker pause`
freezes a container's processes and `read_frozen` says so from the host, whichever freezer
(cgroup v1 or v2) the engine uses here; the node collector's dossier carries it."""

from __future__ import annotations

from tpwarden.node.dossier import collect_dossier
from tpwarden.node.freezer import read_frozen

from tests.gateways.test_docker_gw import _wait


def test_docker_pause_is_read_as_frozen_and_unpause_as_thawed(sleeper) -> None:
    sleeper.reload()
    pid = int(sleeper.attrs["State"]["Pid"])
    assert read_frozen(pid) is False
    sleeper.pause()
    _wait(lambda: read_frozen(pid) is True, timeout=5.0)  # docker pause: read as frozen
    part = collect_dossier(
        [pid], window_s=0.2, kernel_log=lambda since: {"source": None, "events": []}
    )
    [proc] = part["processes"]
    assert (proc["pid"], proc["frozen"], proc["cpu_delta_s"]) == (pid, True, 0.0)
    sleeper.unpause()
    _wait(lambda: read_frozen(pid) is False, timeout=5.0)  # unpause: thawed
