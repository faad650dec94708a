"""Print what the `tpwarden` command line costs to start, as ratios measured in one run (issue 30):

- `tpwarden --help` and a TAB completion against `python -c pass`
  (goal: <= 4x python -c pass + 0.1 s): of a command name, and of a value (issue 52: node names
  from the inventory, eval tasks, `--set` keys, `rollout --bench` presets);
- `tpwarden inventory check` against `ansible-inventory --list` on the same file (goal <= 1.0x).

    python bench/cli_startup.py [--runs 5] [-i inventory.example.yml]

Not a timed test. Each command is a fresh process; what is reported is the median CPU time (user +
system, as the issue measured) over ``--runs`` rounds, the commands interleaved round by round so
that a loaded machine weighs on all of them alike.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def cpu_s(argv: list[str], env: dict[str, str] | None = None) -> float:
    """CPU seconds (user + system) of one fresh ``argv`` process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(argv, capture_output=True, env=env, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def medians(
    cases: dict[str, tuple[list[str], dict[str, str] | None]], runs: int
) -> dict[str, float]:
    """Median CPU seconds per case, the cases interleaved round by round."""
    seen: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(runs):
        for name, (argv, env) in cases.items():
            seen[name].append(cpu_s(argv, env))
    return {name: statistics.median(times) for name, times in seen.items()}


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
    values = {  # a value of an option or argument (issue 52): nodes, tasks, --set keys, presets
        "TAB: logs -i INV <TAB>": (f"tpwarden logs -i {args.inventory} ", "4"),
        "TAB: eval run --tasks gsm<TAB>": ("tpwarden eval run --tasks gsm", "4"),
        "TAB: rollout --set drafter.n<TAB>": ("tpwarden rollout --set drafter.n", "3"),
        "TAB: rollout --bench <TAB>": ("tpwarden rollout --bench ", "3"),
    }
    cases = {
        "python -c pass": ([sys.executable, "-c", "pass"], None),
        "tpwarden --help": ([*cli, "--help"], None),
        "TAB: tpwarden wat<TAB>": (cli, top),
        "TAB: tpwarden watchdog h<TAB>": (cli, complete),
        **{
            name: (cli, {**complete, "COMP_WORDS": words, "COMP_CWORD": cword})
            for name, (words, cword) in values.items()
        },
        "ansible-inventory --list": ([ansible_inventory, "-i", args.inventory, "--list"], None),
        "inventory check": ([*cli, "inventory", "check", "-i", args.inventory], None),
    }
    got = medians(cases, args.runs)
    base, ref, check = (
        got["python -c pass"],
        got["ansible-inventory --list"],
        got["inventory check"],
    )
    goal = 4 * base + 0.1
    print(f"python -c pass: {base:.3f} s CPU; goal for --help and TAB: {goal:.3f} s "
          f"(4x + 0.1 s); medians of {args.runs} interleaved rounds")  # fmt: skip
    for name in (
        "tpwarden --help",
        "TAB: tpwarden wat<TAB>",
        "TAB: tpwarden watchdog h<TAB>",
        *values,
    ):
        took = got[name]
        verdict = "ok" if took <= goal else "OVER"
        print(f"  {name:34s} {took:.3f} s = {took / base:5.1f}x python -c pass  [{verdict}]")
    verdict = "ok" if check <= ref else "OVER"
    print(f"  {'inventory check':34s} {check:.3f} s = {check / ref:.2f}x ansible-inventory "
          f"--list ({ref:.3f} s)  [{verdict}, goal <= 1.0x]")  # fmt: skip


if __name__ == "__main__":
    main()
