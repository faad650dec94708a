"""Print each test tier's share of a test run, from the JUnit XML report pytest writes.

    python bench/test_tiers.py [build/test-report.xml]

`scripts/test.sh` has pytest write that report (`--junitxml`), so every run of the README's test
command can be broken down afterwards. A tier is the folder under tests/ (unit, lab, engine, ...);
a test's time is its setup + call + teardown as pytest measured it, so session fixtures (the lab,
the real engine) count in the tier of the first test that needed them. The shares are of the sum
of all tests' times, measured in the same run; the wall-clock total is printed beside it.
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path


def tier_of(classname: str, file: str | None) -> str:
    """`tests.lab.test_x.TestY` or `tests/lab/test_x.py` -> `lab`."""
    parts = (file or "").replace("\\", "/").split("/")
    if len(parts) > 1 and parts[0] == "tests":
        return parts[1]
    dotted = classname.split(".")
    if len(dotted) > 1 and dotted[0] == "tests":
        return dotted[1]
    return "(other)"


def tally(report: Path) -> tuple[dict[str, list[float]], dict[str, int], float]:
    """Per tier: the seconds of each test, and the counts of outcomes; and the suite's wall time."""
    root = ET.parse(report).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    seconds: dict[str, list[float]] = defaultdict(list)
    outcomes: dict[str, int] = defaultdict(int)
    wall = sum(float(s.get("time", 0.0)) for s in suites)
    for case in root.iter("testcase"):
        tier = tier_of(case.get("classname", ""), case.get("file"))
        seconds[tier].append(float(case.get("time", 0.0)))
        kinds = {child.tag for child in case}
        outcome = next((k for k in ("failure", "error", "skipped") if k in kinds), "passed")
        outcomes[outcome] += 1
    return seconds, outcomes, wall


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("report", nargs="?", type=Path, default=Path("build/test-report.xml"))
    parser.add_argument(
        "--count-line", action="store_true", help="print only the line 'tests: N passed, N failed'"
    )
    args = parser.parse_args(argv)
    if not args.report.is_file():
        print(
            f"error: no JUnit report at {args.report}: run `bash scripts/test.sh` first",
            file=sys.stderr,
        )
        return 2
    seconds, outcomes, wall = tally(args.report)
    count_line = (
        f"tests: {outcomes['passed']} passed, {outcomes['failure'] + outcomes['error']} failed, "
        f"{outcomes['skipped']} skipped"
    )
    if args.count_line:
        print(count_line)
        return 0
    total = sum(sum(v) for v in seconds.values()) or 1.0
    print(f"{'tier':<14}{'tests':>7}{'seconds':>10}{'share':>8}{'slowest':>10}")
    for tier, times in sorted(seconds.items(), key=lambda kv: -sum(kv[1])):
        print(
            f"{tier:<14}{len(times):>7}{sum(times):>10.1f}{sum(times) / total:>8.1%}"
            f"{max(times):>10.1f}"
        )
    counted = sum(len(v) for v in seconds.values())
    print(f"{'all':<14}{counted:>7}{total:>10.1f}{1:>8.0%}")
    print(f"pytest wall time: {wall:.1f} s")
    print(count_line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
