"""Print `status` wall time for every node in parallel vs a sequential per-node baseline.

    python bench/status_parallel.py -i /var/lib/tpwarden-lab/inventory.yml [--runs 3]

Not a timed test: it prints figures and the ratio measured in the same run.
"""

from __future__ import annotations

import argparse
import statistics
import time

from tpwarden.cluster.control.controller import Controller
from tpwarden.cluster.inventory.load import load_inventory


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-i", "--inventory", required=True)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    spec = load_inventory(args.inventory)
    par, seq = [], []
    for _ in range(args.runs):
        with Controller(spec, node_timeout_s=10) as ctl:  # fresh connections each run
            t0 = time.monotonic()
            st = ctl.status()
            par.append(time.monotonic() - t0)
        with Controller(spec, node_timeout_s=10) as ctl:
            t0 = time.monotonic()
            for node in spec.nodes:
                ctl.docker(node).list_tpwarden(spec.name)
                ctl.collector(node, ["show"])
            ctl._server_status(10.0)  # noqa: SLF001 - same server checks as status()
            seq.append(time.monotonic() - t0)
    p, s = statistics.median(par), statistics.median(seq)
    print(f"nodes={len(spec.nodes)} verdict={st.verdict.value}")
    print(f"parallel status   median {p:.3f} s  runs {[round(x, 3) for x in par]}")
    print(f"sequential nodes  median {s:.3f} s  runs {[round(x, 3) for x in seq]}")
    print(f"speed-up x{s / p:.2f}")


if __name__ == "__main__":
    main()
