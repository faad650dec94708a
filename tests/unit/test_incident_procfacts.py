"""/proc facts on real /proc files (tests/fixtures/proc/README.md) (issue 32)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from tpwarden.node.procfacts import (
    ProcGone,
    cpu_delta,
    descendants,
    facts_from,
    parse_stat,
    read_proc,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "proc"


def facts(name: str, stat: str = "stat"):
    d = FIXTURES / name
    return facts_from((d / stat).read_text(), (d / "status").read_text(), (d / "wchan").read_text())


@pytest.mark.parametrize(
    ("name", "state", "state_name", "wchan", "threads"),
    [
        ("waiting-rank-S", "S", "sleeping", "futex_do_wait", 6),
        ("stopped-rank-T", "T", "stopped", "do_signal_stop", 5),
        ("threads-S", "S", "sleeping", None, 3),
        ("busy-R", "R", "running", None, 2),
        ("zombie-Z", "Z", "zombie", None, 1),
    ],
)
def test_state_wchan_and_threads(
    name: str, state: str, state_name: str, wchan: str | None, threads: int
) -> None:
    f = facts(name)
    assert (f.state, f.state_name, f.threads) == (state, state_name, threads)
    if wchan is not None:
        assert f.wchan == wchan
    if state in ("R", "Z"):
        assert f.wchan is None  # "0" in the file


def test_cpu_time_and_rss_of_the_stopped_rank() -> None:
    f = facts("stopped-rank-T")
    assert (f.pid, f.comm, f.ppid) == (2765, "python", 1)
    assert f.cpu_s == pytest.approx(4.40)  # utime 130 + stime 310 ticks at 100 Hz
    assert f.rss_bytes == 230076 * 1024  # VmRSS wins over stat's page count


def test_a_zombie_has_no_rss_line_and_falls_back_to_stat() -> None:
    assert facts("zombie-Z").rss_bytes == 0


def test_cpu_delta_shows_the_stopped_rank_made_no_progress_and_the_waiting_one_did() -> None:
    stopped = cpu_delta(facts("stopped-rank-T"), facts("stopped-rank-T", "stat.later"))
    waiting = cpu_delta(facts("waiting-rank-S"), facts("waiting-rank-S", "stat.later"))
    assert stopped == 0.0
    assert waiting is not None and waiting > 0  # gloo's threads still poll


def test_cpu_delta_is_none_for_a_reused_pid() -> None:
    a = facts("stopped-rank-T")
    b = facts_from(
        (FIXTURES / "stopped-rank-T" / "stat").read_text().replace(" 3038172 ", " 4000000 "),
        "",
        "0",
    )
    assert b.start_ticks == 4000000 and cpu_delta(a, b) is None


def test_a_command_name_with_spaces_and_parentheses() -> None:
    text = (FIXTURES / "busy-R" / "stat").read_text().replace("(python)", "(a (b) c)")
    s = parse_stat(text)
    assert (s.comm, s.state, s.pid) == ("a (b) c", "R", 3536)


def test_garbage_is_refused() -> None:
    with pytest.raises(ValueError):
        parse_stat("12 (x) S 1")


def test_descendants_of_a_container_init() -> None:
    parents = {1: 0, 100: 1, 101: 100, 102: 100, 103: 101, 200: 1, 201: 200}
    assert descendants(parents, [100]) == [100, 101, 102, 103]
    assert descendants(parents, [999]) == []


def test_read_proc_on_this_process_and_a_gone_one() -> None:
    me = read_proc(os.getpid())
    assert me.pid == os.getpid() and me.state == "R" and me.threads >= 1
    with pytest.raises(ProcGone):
        read_proc(2**22 + 12345)
