"""Is a process frozen? The cgroup freezer's own state, on real files captured from this
project's machine (tests/fixtures/proc/README.md: frozen-D-v1 by `docker pause`, the cgroup v1
freezer; frozen-S-v2 by writing 1 to the container's cgroup v2 `cgroup.freeze`) (issue 32)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from tpwarden.node.freezer import freezer_files, frozen_from, read_frozen

from tests.unit.test_incident_procfacts import facts

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "proc"
V1 = "docker/abe0bbf7b6c61d9c4c033a03409135f0b78cc9e0ee4951303b94828a54639d52"
V2 = "docker/818bbb92c16d171ebaf75965aecb15e9e8ce6f224fe6cdd61f3e7d870ec1216c"


def test_state_and_wchan_do_not_say_frozen() -> None:
    v1, v2 = facts("frozen-D-v1"), facts("frozen-S-v2")
    assert (v1.state, v1.wchan) == ("D", "hrtimer_nanosleep")  # where it slept before
    assert (v2.state, v2.wchan) == ("S", "get_signal")  # not do_freezer_trap on this kernel


def test_where_a_hybrid_hosts_process_has_its_freezer_state() -> None:
    text = (FIXTURES / "frozen-D-v1" / "cgroup").read_text()
    assert freezer_files(text, "/cg") == [
        Path(f"/cg/freezer/{V1}/freezer.state"),
        Path(f"/cg/{V1}/cgroup.events"),
        Path(f"/cg/unified/{V1}/cgroup.events"),
    ]
    assert freezer_files("0::/system.slice/docker-1.scope\n", "/cg")[0] == Path(
        "/cg/system.slice/docker-1.scope/cgroup.events"
    )


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("frozen-D-v1/freezer.state", True),
        ("frozen-D-v1/unified-cgroup.events", False),  # the v2 freezer was not used
        ("frozen-S-v2/freezer.state", False),
        ("frozen-S-v2/unified-cgroup.events", True),
        ("frozen-S-v2/unified-cgroup.events.thawed", False),
    ],
)
def test_each_freezer_file_answers(name: str, expected: bool) -> None:
    path = FIXTURES / name
    kind = "freezer.state" if "freezer" in name else "cgroup.events"
    assert frozen_from(Path(kind), path.read_text()) is expected


def test_a_cgroup_outside_the_readers_namespace_gives_no_file() -> None:
    """Read from a diagnostic container's cgroup namespace, the rank's cgroup climbs out of it:
    joined to the reader's own mount, `..` would name another cgroup."""
    assert freezer_files("0::/../docker-1.scope\n", "/cg") == []
    assert freezer_files("7:freezer:/../abc\n0::/../abc\n", "/cg") == []


def test_a_file_without_an_answer_is_none() -> None:
    assert frozen_from(Path("cgroup.events"), "populated 1\n") is None  # kernel < 5.2
    assert frozen_from(Path("freezer.state"), "SOMETHING\n") is None


def _host(tmp: Path, case: str, cgroup_dir: str, v1: str | None, v2: str | None):
    """A /proc and a hybrid /sys/fs/cgroup holding the captured files of ``case``: ``v1`` as
    the freezer's freezer.state, ``v2`` as the unified hierarchy's cgroup.events."""
    proc, cg = tmp / "proc", tmp / "cg"
    (proc / "42").mkdir(parents=True)
    shutil.copy(FIXTURES / case / "cgroup", proc / "42" / "cgroup")
    for captured, target in [(v1, cg / "freezer"), (v2, cg / "unified")]:
        if captured is not None:
            name = "freezer.state" if target.name == "freezer" else "cgroup.events"
            (target / cgroup_dir).mkdir(parents=True)
            shutil.copy(FIXTURES / case / captured, target / cgroup_dir / name)
    return proc, cg


def test_either_freezer_holding_the_process_is_frozen(tmp_path: Path) -> None:
    events = "unified-cgroup.events"
    proc, cg = _host(tmp_path / "v1", "frozen-D-v1", V1, "freezer.state", events)
    assert read_frozen(42, proc, cg) is True
    proc, cg = _host(tmp_path / "v2", "frozen-S-v2", V2, "freezer.state", events)
    assert read_frozen(42, proc, cg) is True
    proc, cg = _host(tmp_path / "thawed", "frozen-S-v2", V2, "freezer.state", events + ".thawed")
    assert read_frozen(42, proc, cg) is False


def test_nothing_readable_is_none(tmp_path: Path) -> None:
    proc, cg = _host(tmp_path, "frozen-D-v1", V1, None, None)
    assert read_frozen(42, proc, cg) is None
    assert read_frozen(43, proc, cg) is None  # no such process
