"""Print what the `tpwarden` command line costs to start, as ratios measured in one run (issue 30):

- `tpwarden --help` and a TAB completion against `python -c pass`
  (goal: <= 4x python -c pass + 0.1 s);
- `tpwarden inventory check` against `ansible-inventory --list` on the same file (goal <= 1.0x).

    python bench/cli_startup.py [--runs 5] [-i inventory.example.yml]

Not a timed test (a loaded machine moves every number; the ratios are taken from the same runs):
each command is a fresh process; the median wall time of ``--runs`` runs is reported.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def median_s(argv: list[str], runs: int, env: dict[str, str] | None = None) -> float:
    """Median wall seconds of ``argv`` over ``runs`` fresh processes."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, capture_output=True, env=env, check=False)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("-i", "--inventory", default=str(ROOT / "inventory.example.yml"))
    args = ap.parse_args()
    cli = [sys.executable, "-m", "tpwarden.cluster.cli"]
    ansible_inventory = shutil.which("ansible-inventory", path=str(BIN)) or "ansible-inventory"
    complete = {**os.environ, "_TPWARDEN_COMPLETE": "complete_bash",
                "COMP_WORDS": "tpwarden watchdog h", "COMP_CWORD": "2"}  # fmt: skip
    top = {**complete, "COMP_WORDS": "tpwarden wat", "COMP_CWORD": "1"}
    base = median_s([sys.executable, "-c", "pass"], args.runs)
    goal = 4 * base + 0.1
    rows = [
        ("tpwarden --help", median_s([*cli, "--help"], args.runs), goal),
        ("TAB: tpwarden wat<TAB>", median_s(cli, args.runs, top), goal),
        ("TAB: tpwarden watchdog h<TAB>", median_s(cli, args.runs, complete), goal),
    ]
    ref = median_s([ansible_inventory, "-i", args.inventory, "--list"], args.runs)
    check = median_s([*cli, "inventory", "check", "-i", args.inventory], args.runs)
    print(f"python -c pass: {base:.3f} s; goal for --help and TAB: {goal:.3f} s "
          f"(4x + 0.1 s); median of {args.runs} runs")  # fmt: skip
    for name, took, limit in rows:
        verdict = "ok" if took <= limit else "OVER"
        print(f"  {name:32s} {took:.3f} s = {took / base:5.1f}x python -c pass  [{verdict}]")
    verdict = "ok" if check <= ref else "OVER"
    print(f"  {'inventory check':32s} {check:.3f} s = {check / ref:.2f}x ansible-inventory "
          f"--list ({ref:.3f} s)  [{verdict}, goal <= 1.0x]")  # fmt: skip


if __name__ == "__main__":
    main()
