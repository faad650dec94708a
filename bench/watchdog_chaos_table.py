"""Print the watchdog chaos matrix (issue 29 item 11) as a table: for every seam x failure kind,
what happened within the bound (restarted / alert delivered / alert queued), whether the phase
was ever stuck in `restarting`, and whether the fault really fired.

    python bench/watchdog_chaos_table.py [--markdown]

Runs the same cells as tests/unit/test_watchdog_chaos.py (its `run_cell`), nothing sleeps.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.unit.test_watchdog_chaos import KINDS, NOT_MEANINGFUL, SEAMS, run_cell  # noqa: E402


def cell(seam: str, kind: str) -> str:
    if (seam, kind) in NOT_MEANINGFUL:
        return "n/a"
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as mp:
        out = run_cell(Path(tmp), mp, seam, kind)
    said = [
        name
        for name, key in (
            ("restart", "restarted"),
            ("alert", "alert_delivered"),
            ("queued", "alert_queued"),
        )  # fmt: skip
        if out[key]
    ]
    verdict = "+".join(said) or "NOTHING"
    if out["stuck_restarting"]:
        verdict += " STUCK"
    if not out["fault_fired"]:
        verdict += " (fault did not fire)"
    return verdict


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--markdown", action="store_true", help="a Markdown table")
    args = parser.parse_args()
    rows = [[seam, *(cell(seam, kind) for kind in KINDS)] for seam in SEAMS]
    header = ["seam", *KINDS]
    if args.markdown:
        print("| " + " | ".join(header) + " |")
        print("|" + "---|" * len(header))
        for row in rows:
            print("| " + " | ".join(row) + " |")
    else:
        widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
        for row in [header, *rows]:
            print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))
    bad = [r for r in rows if any("NOTHING" in c or "STUCK" in c or "did not" in c for c in r)]
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
