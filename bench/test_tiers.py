"""Print each test tier's share of a test run, from the JUnit XML reports pytest writes.

    python bench/test_tiers.py [REPORT ...]     # default: build/test-report*.xml

`scripts/test.sh` has each of its pytest processes write one report (`--junitxml`), so every run
of the README's test command can be broken down afterwards. A tier is the folder under tests/
(unit, lab, engine, ...); a test's time is its setup + call + teardown as pytest measured it, so
session fixtures (the lab, the real engine) count in the tier of the first test that needed them.
The shares are of the sum of all tests' times, measured in the same run. Each report's wall time
is printed beside it: the processes of one run may overlap (the pure tiers run beside the lab),
so the run's own wall time is the test command's, which `.ci/run` prints. Then the 25 slowest
tests of the whole run, and a last line 'tests: N passed, N failed, N skipped'.

The `cores` columns say how many of the machine's cores were busy, on average, while a tier's or
a test's time ran (tests/conftest.py records the machine's busy CPU seconds per test): whoever
used them, so a lab test's figure includes the pure tiers running beside it. A slow test that
leaves the cores idle is waiting; one that keeps them all busy is bound by the machine.
"""

from __future__ import annotations

import argparse
import os
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

SLOWEST = 25
CPU_BUSY_PROPERTY = "machine_cpu_busy_s"  # tests/conftest.py


def tier_of(classname: str, file: str | None) -> str:
    """`tests.lab.test_x.TestY` or `tests/lab/test_x.py` -> `lab`."""
    parts = (file or "").replace("\\", "/").split("/")
    if len(parts) > 1 and parts[0] == "tests":
        return parts[1]
    dotted = classname.split(".")
    if len(dotted) > 1 and dotted[0] == "tests":
        return dotted[1]
    return "(other)"


@dataclass
class Tally:
    """What the reports hold: per tier the seconds of each test, the outcome counts, each
    report's wall time, and every test's (seconds, id)."""

    seconds: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    busy: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    outcomes: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    walls: list[tuple[Path, float]] = field(default_factory=list)
    tests: list[tuple[float, str, float | None]] = field(default_factory=list)


def busy_of(case: ET.Element) -> float | None:
    """The machine's busy CPU seconds during the test, where the run recorded them."""
    for prop in case.iter("property"):
        if prop.get("name") == CPU_BUSY_PROPERTY:
            return float(prop.get("value", "nan"))
    return None


def cores(busy: float | None, seconds: float) -> str:
    return "-" if busy is None or seconds <= 0 else f"{busy / seconds:.2f}"


def tally(reports: list[Path]) -> Tally:
    out = Tally()
    for report in reports:
        root = ET.parse(report).getroot()
        suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
        out.walls.append((report, sum(float(s.get("time", 0.0)) for s in suites)))
        for case in root.iter("testcase"):
            classname = case.get("classname", "")
            seconds, busy = float(case.get("time", 0.0)), busy_of(case)
            tier = tier_of(classname, case.get("file"))
            out.seconds[tier].append(seconds)
            if busy is not None:
                out.busy[tier].append(busy)
            out.tests.append((seconds, f"{classname}::{case.get('name', '')}", busy))
            kinds = {child.tag for child in case}
            outcome = next((k for k in ("failure", "error", "skipped") if k in kinds), "passed")
            out.outcomes[outcome] += 1
    return out


def count_line(t: Tally) -> str:
    failed = t.outcomes["failure"] + t.outcomes["error"]
    return f"tests: {t.outcomes['passed']} passed, {failed} failed, {t.outcomes['skipped']} skipped"


def print_breakdown(t: Tally) -> None:
    total = sum(sum(v) for v in t.seconds.values()) or 1.0
    print(f"{'tier':<14}{'tests':>7}{'seconds':>10}{'share':>8}{'slowest':>10}{'cores':>7}")
    for tier, times in sorted(t.seconds.items(), key=lambda kv: -sum(kv[1])):
        busy = sum(t.busy[tier]) if len(t.busy[tier]) == len(times) else None
        print(
            f"{tier:<14}{len(times):>7}{sum(times):>10.1f}{sum(times) / total:>8.1%}"
            f"{max(times):>10.1f}{cores(busy, sum(times)):>7}"
        )
    counted = sum(len(v) for v in t.seconds.values())
    print(f"{'all':<14}{counted:>7}{total:>10.1f}{1:>8.0%}")
    for report, wall in t.walls:
        print(f"pytest wall time: {wall:.1f} s ({report.name})")
    print(f"the {SLOWEST} slowest tests (setup + call + teardown; cores busy of {os.cpu_count()}):")
    slowest = sorted(t.tests, key=lambda row: row[0], reverse=True)[:SLOWEST]
    for seconds, test, busy in slowest:
        print(f"{seconds:>9.1f} s {cores(busy, seconds):>6}  {test}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("reports", nargs="*", type=Path, help="default: build/test-report*.xml")
    parser.add_argument(
        "--count-line", action="store_true", help="print only the line 'tests: N passed, N failed'"
    )
    args = parser.parse_args(argv)
    reports = args.reports or sorted(Path("build").glob("test-report*.xml"))
    missing = [r for r in reports if not r.is_file()]
    if not reports or missing:
        where = ", ".join(map(str, missing)) or "build/test-report*.xml"
        print(
            f"error: no JUnit report at {where}: run `bash scripts/test.sh` first", file=sys.stderr
        )
        return 2
    t = tally(reports)
    if not args.count_line:
        print_breakdown(t)
    print(count_line(t))
    return 0


if __name__ == "__main__":
    sys.exit(main())
