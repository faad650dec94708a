"""bench/test_tiers.py: each tier's share of a run, from pytest's JUnit report."""

from __future__ import annotations

import re
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


def test_reports_of_one_run_are_summed_and_the_slowest_listed_across_them(tmp_path):
    (tmp_path / "test-report-lab.xml").write_text(REPORT)
    (tmp_path / "test-report-pure.xml").write_text(
        '<testsuites><testsuite time="3.0">'
        '<testcase classname="tests.unit.test_z" name="slow" time="9.0"/>'
        "</testsuite></testsuites>"
    )
    done = run(str(tmp_path / "test-report-lab.xml"), str(tmp_path / "test-report-pure.xml"))
    assert done.returncode == 0, done.stderr
    rows = [line.split() for line in done.stdout.splitlines()[1:4]]
    assert [r[0] for r in rows] == ["unit", "lab", "engine"]
    assert rows[0][1:3] == ["3", "11.0"]
    assert "pytest wall time: 14.5 s (test-report-lab.xml)" in done.stdout
    assert "pytest wall time: 3.0 s (test-report-pure.xml)" in done.stdout
    slowest = done.stdout.split("slowest tests")[1].splitlines()[1:3]
    assert slowest[0].split() == ["9.0", "s", "-", "tests.unit.test_z::slow"]
    assert slowest[1].split() == ["8.0", "s", "-", "tests.lab.test_b::t2"]
    assert done.stdout.splitlines()[-1] == "tests: 3 passed, 2 failed, 1 skipped"


def test_cores_busy_per_tier_and_per_test_from_the_recorded_cpu_seconds(tmp_path):
    """tests/conftest.py records the machine's busy CPU seconds per test; a tier's cores are
    its busy seconds over its time, and a tier with a test that lacks the figure shows none."""
    prop = '<properties><property name="machine_cpu_busy_s" value="{}"/></properties>'
    (tmp_path / "r.xml").write_text(
        '<testsuites><testsuite time="30.0">'
        f'<testcase classname="tests.lab.test_w" name="waits" time="20.0">{prop.format(4.0)}'
        "</testcase>"
        f'<testcase classname="tests.lab.test_w" name="works" time="10.0">{prop.format(18.0)}'
        "</testcase>"
        '<testcase classname="tests.unit.test_u" name="old" time="1.0"/>'
        "</testsuite></testsuites>"
    )
    done = run(str(tmp_path / "r.xml"))
    assert done.returncode == 0, done.stderr
    rows = {line.split()[0]: line.split() for line in done.stdout.splitlines()[1:3]}
    assert rows["lab"][5] == "0.73"  # the cores column: (4 + 18) / (20 + 10)
    assert rows["unit"][5:] == ["-", "-", "-"]
    slowest = done.stdout.split("slowest tests")[1].splitlines()[1:4]
    assert [row.split()[:3] for row in slowest] == [
        ["20.0", "s", "0.20"], ["10.0", "s", "1.80"], ["1.0", "s", "-"],
    ]  # fmt: skip


def test_default_is_every_report_under_build(tmp_path):
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / "test-report-a.xml").write_text(REPORT)
    (tmp_path / "build" / "test-report-b.xml").write_text(REPORT)
    done = subprocess.run([sys.executable, str(SCRIPT), "--count-line"], capture_output=True,
                          text=True, cwd=tmp_path)  # fmt: skip
    assert done.stdout == "tests: 4 passed, 4 failed, 2 skipped\n", done.stderr


def test_the_test_command_runs_every_tier():
    """scripts/test.sh names its tiers (three pytest processes): a new folder under tests/ with
    tests must be named there too, or the README's test command would silently skip it."""
    root = SCRIPT.parents[1]
    tiers = {p.parent.name for p in (root / "tests").glob("*/test_*.py")}
    script = (root / "scripts" / "test.sh").read_text()
    named = set(
        re.findall(r"(?<![\w/])tests/(\w+)(?=[\s\"])", script.split('if [ "$#" -gt 0 ]')[1])
    )
    assert tiers == named, (sorted(tiers), sorted(named))


def test_floor_per_tier_and_over_the_run(tmp_path):
    """Issue 50: a tier's floor is its busy CPU-seconds over the cores; the run's wall against
    the run's floor when test.sh passes them."""
    prop = '<properties><property name="machine_cpu_busy_s" value="{}"/></properties>'
    (tmp_path / "r.xml").write_text(
        '<testsuites><testsuite time="30.0">'
        f'<testcase classname="tests.lab.test_w" name="waits" time="20.0">{prop.format(4.0)}'
        "</testcase>"
        f'<testcase classname="tests.lab.test_w" name="works" time="10.0">{prop.format(18.0)}'
        "</testcase></testsuite></testsuites>"
    )
    done = run("--cores", "2", "--run-wall", "900", "--run-busy", "1200", str(tmp_path / "r.xml"))
    assert done.returncode == 0, done.stderr
    header = done.stdout.splitlines()[0].split()
    assert header[-2:] == ["floor", "w/floor"]
    lab = done.stdout.splitlines()[1].split()
    # 22 busy CPU-s over 2 cores: a floor of 11 s, against 30 s taken
    assert lab[0] == "lab" and lab[-2:] == ["11.0", "2.73"]
    assert "run: wall 900 s; floor 600 s (1200 busy CPU-s / 2 cores); wall/floor 1.50" in (
        done.stdout
    )


def test_baseline_ids_must_have_run_and_passed(tmp_path):
    (tmp_path / "r.xml").write_text(REPORT)
    baseline = tmp_path / "ids.txt"
    baseline.write_text("# comment\ntests/unit/test_a.py::t1\ntests/unit/test_a.py::t5\n")
    done = run("--baseline", str(baseline), str(tmp_path / "r.xml"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "baseline: 2 of 2 ran and passed"
    baseline.write_text("tests/lab/test_b.py::t2\ntests/unit/test_a.py::TestX::t9[1]\n")
    done = run("--baseline", str(baseline), str(tmp_path / "r.xml"))
    assert done.returncode == 1
    assert done.stdout.splitlines()[-1] == (
        "baseline: 0 of 2 ran and passed; not: tests.lab.test_b::t2, tests.unit.test_a.TestX::t9[1]"
    )
