"""Print what the `tpwarden` command line costs to start, and the share of it spent importing the
command groups' own modules (bench, decide, eval, the morning report, rollout), which the CLI now
imports at its top instead of inside each command.

    python bench/cli_startup.py [--runs 7]

Not a timed test: each run is a fresh `python -X importtime -c 'import tpwarden.cluster.cli'`;
it prints the median total and the median share of those modules, measured in the same runs.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys

# the modules a command group imports that the CLI used to defer
GROUPS = (
    "tpwarden.cluster.bench",
    "tpwarden.cluster.decide",
    "tpwarden.cluster.eval",
    "tpwarden.cluster.morning",
    "tpwarden.cluster.rollout",
    "tpwarden.watchdog.thermal.plot",
)


def one_run() -> tuple[float, float]:
    """(total seconds, seconds under the GROUPS modules) of one cold CLI import."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import tpwarden.cluster.cli"],
        capture_output=True,
        text=True,
        check=True,
    )
    total_us = groups_us = 0
    inside_depth: int | None = None  # nesting depth of the GROUPS entry being counted
    # importtime prints children before their parent: walk it backwards, parents first
    for line in reversed(done.stderr.splitlines()):
        if not line.startswith("import time:") or "|" not in line:
            continue
        _, cumulative, name_col = line.split("|", 2)
        if not cumulative.strip().isdigit():
            continue  # the header
        depth = (len(name_col) - len(name_col.lstrip())) // 2
        name = name_col.strip()
        if depth == 0:  # a top-level import: its cumulative time covers its whole subtree
            total_us += int(cumulative)
        if inside_depth is not None and depth <= inside_depth:
            inside_depth = None
        if inside_depth is None and name.startswith(GROUPS):
            groups_us += int(cumulative)
            inside_depth = depth
    return total_us / 1e6, groups_us / 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7)
    args = ap.parse_args()
    runs = [one_run() for _ in range(args.runs)]
    total = statistics.median(t for t, _ in runs)
    groups = statistics.median(g for _, g in runs)
    share = statistics.median(g / t for t, g in runs)
    print(f"import tpwarden.cluster.cli: median {total:.3f} s over {args.runs} runs")
    print(f"  of which the command groups' modules: {groups:.3f} s ({share:.1%} of the start-up)")


if __name__ == "__main__":
    main()
