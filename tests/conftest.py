"""Every tier: how busy the machine's CPUs were during each test (issue 35).

Each test's JUnit entry gets a property ``machine_cpu_busy_s``: the CPU seconds the whole machine
spent outside idle and I/O wait (``/proc/stat``'s first line) from the test's setup to the end of
its teardown. Divided by the test's time it says how many cores were busy, whoever used them
(the test, its containers and nspawn nodes, or a pytest process running beside it). A scenario
that keeps the cores idle while it waits could share the machine with another; one that keeps
them busy cannot. `bench/test_tiers.py` prints the figure for the tiers and the slowest tests.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from pathlib import Path

import pytest

CPU_BUSY_PROPERTY = "machine_cpu_busy_s"
_START = pytest.StashKey[float]()
_TICK = os.sysconf("SC_CLK_TCK")


def machine_cpu_busy_s(stat: Path = Path("/proc/stat")) -> float:
    """CPU seconds of all cores so far, less idle and iowait (user nice system idle iowait irq
    softirq steal: guest time is already in user)."""
    ticks = [int(v) for v in stat.read_text().split("\n", 1)[0].split()[1:9]]
    return (sum(ticks) - ticks[3] - ticks[4]) / _TICK


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    item.stash[_START] = machine_cpu_busy_s()
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    if call.when == "teardown" and _START in item.stash:
        busy = machine_cpu_busy_s() - item.stash[_START]
        item.user_properties.append((CPU_BUSY_PROPERTY, f"{busy:.1f}"))
    return (yield)
