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
used them, so a lab test's figure includes the tiers running beside it. A slow test that
leaves the cores idle is waiting; one that keeps them all busy is bound by the machine.

The floor (issue 50) is the time the busy CPU-seconds alone fill every core for: no schedule can
beat it. `floor` and `wall/floor` are printed per tier (its tests' time against the machine's
busy seconds meanwhile) and, with `--run-wall` and `--run-busy` (scripts/test.sh passes the
whole pytest run's), over the run. `--baseline FILE` (tests/baseline_test_ids.txt) counts how
many of those test ids ran and passed in these reports, and names the ones that did not.
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
    passed: list[str] = field(default_factory=list)  # classname::name of each passed test


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
            if outcome == "passed":
                out.passed.append(f"{classname}::{case.get('name', '')}")
    return out


def count_line(t: Tally) -> str:
    failed = t.outcomes["failure"] + t.outcomes["error"]
    return f"tests: {t.outcomes['passed']} passed, {failed} failed, {t.outcomes['skipped']} skipped"


def floor_cells(busy: float | None, seconds: float, ncores: int) -> str:
    """`floor` and `wall/floor` columns: busy CPU-seconds over every core, and the time taken
    against it."""
    if busy is None or busy <= 0:
        return f"{'-':>8}{'-':>8}"
    floor = busy / ncores
    return f"{floor:>8.1f}{seconds / floor:>8.2f}"


def print_breakdown(t: Tally, ncores: int) -> None:
    total = sum(sum(v) for v in t.seconds.values()) or 1.0
    print(
        f"{'tier':<14}{'tests':>7}{'seconds':>10}{'share':>8}{'slowest':>10}{'cores':>7}"
        f"{'floor':>8}{'w/floor':>8}"
    )
    for tier, times in sorted(t.seconds.items(), key=lambda kv: -sum(kv[1])):
        busy = sum(t.busy[tier]) if len(t.busy[tier]) == len(times) else None
        print(
            f"{tier:<14}{len(times):>7}{sum(times):>10.1f}{sum(times) / total:>8.1%}"
            f"{max(times):>10.1f}{cores(busy, sum(times)):>7}"
            f"{floor_cells(busy, sum(times), ncores)}"
        )
    counted = sum(len(v) for v in t.seconds.values())
    print(f"{'all':<14}{counted:>7}{total:>10.1f}{1:>8.0%}")
    for report, wall in t.walls:
        print(f"pytest wall time: {wall:.1f} s ({report.name})")
    print(f"the {SLOWEST} slowest tests (setup + call + teardown; cores busy of {ncores}):")
    slowest = sorted(t.tests, key=lambda row: row[0], reverse=True)[:SLOWEST]
    for seconds, test, busy in slowest:
        print(f"{seconds:>9.1f} s {cores(busy, seconds):>6}  {test}")


def run_line(wall_s: float, busy_s: float, ncores: int) -> str:
    """The whole run against its floor (issue 50's measure)."""
    floor = busy_s / ncores
    ratio = wall_s / floor if floor > 0 else float("nan")
    return (
        f"run: wall {wall_s:.0f} s; floor {floor:.0f} s ({busy_s:.0f} busy CPU-s / {ncores} "
        f"cores); wall/floor {ratio:.2f}"
    )


def junit_id(test_id: str) -> str:
    """`tests/unit/test_x.py::TestA::test_b[1]` -> `tests.unit.test_x.TestA::test_b[1]`, the
    form of a JUnit report's classname::name."""
    path, _, rest = test_id.partition("::")
    module = path.removesuffix(".py").replace("/", ".")
    *classes, name = rest.split("::")
    return ".".join([module, *classes]) + "::" + name


def baseline_line(t: Tally, baseline: Path) -> tuple[str, list[str]]:
    """How many of the baseline's tests ran and passed here, and the ones that did not."""
    wanted = [
        junit_id(line)
        for line in baseline.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    passed = set(t.passed)
    missing = [w for w in wanted if w not in passed]
    return f"baseline: {len(wanted) - len(missing)} of {len(wanted)} ran and passed", missing


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("reports", nargs="*", type=Path, help="default: build/test-report*.xml")
    parser.add_argument(
        "--count-line", action="store_true", help="print only the line 'tests: N passed, N failed'"
    )
    parser.add_argument("--run-wall", type=float, help="the pytest run's wall seconds")
    parser.add_argument("--run-busy", type=float, help="the machine's busy CPU-s over the run")
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 1, help="default: nproc")
    parser.add_argument("--baseline", type=Path, help="test ids that must have run and passed")
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
        print_breakdown(t, args.cores)
    if args.run_wall is not None and args.run_busy is not None:
        print(run_line(args.run_wall, args.run_busy, args.cores))
    print(count_line(t))
    if args.baseline is not None:
        line, missing = baseline_line(t, args.baseline)
        print(line + ("" if not missing else f"; not: {', '.join(missing[:10])}"))
        if missing:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
