"""bench/test_tiers.py: each tier's share of a run, from pytest's JUnit report."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "test_tiers.py"

REPORT = """<?xml version="1.0" encoding="utf-8"?><testsuites>
<testsuite name="pytest" errors="0" failures="1" skipped="1" tests="5" time="14.5">
<testcase classname="tests.unit.test_a" name="t1" time="1.5"/>
<testcase classname="tests.lab.test_b" name="t2" time="8.0"><failure message="x"/></testcase>
<testcase classname="tests.lab.test_b" name="t3" time="2.0"><skipped/></testcase>
<testcase classname="tests.engine.test_c" name="t4" time="2.0"><error message="y"/></testcase>
<testcase classname="tests.unit.test_a" name="t5" time="0.5"/>
</testsuite></testsuites>"""


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True)


def test_tiers_are_summed_and_shared_largest_first(tmp_path):
    report = tmp_path / "r.xml"
    report.write_text(REPORT)
    done = run(str(report))
    assert done.returncode == 0, done.stderr
    rows = [line.split() for line in done.stdout.splitlines()[1:4]]
    assert [r[0] for r in rows] == ["lab", "unit", "engine"]
    assert rows[0][1:4] == ["2", "10.0", "71.4%"]
    assert rows[1][1:4] == ["2", "2.0", "14.3%"]
    assert "pytest wall time: 14.5 s" in done.stdout
    assert done.stdout.splitlines()[-1] == "tests: 2 passed, 2 failed, 1 skipped"


def test_count_line_alone(tmp_path):
    report = tmp_path / "r.xml"
    report.write_text(REPORT)
    assert run("--count-line", str(report)).stdout == "tests: 2 passed, 2 failed, 1 skipped\n"


def test_missing_report_is_an_input_error(tmp_path):
    done = run(str(tmp_path / "none.xml"))
    assert done.returncode == 2
    assert "scripts/test.sh" in done.stderr
