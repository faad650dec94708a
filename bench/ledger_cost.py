"""What the configuration ledger costs: the canary's server time and its share of a night, and
the ledger's write and `why` times against 10,000 records.

1. The canary: server seconds per canary at the default settings (`tpwarden.ledger.canary`:
   levels 1 and 4, 1 warm-up + 5 repeats of 4 requests x 64 tokens), from the field report's
   measured speeds (c=1 12.7 tok/s per stream and 427 ms TTFT, c=4 10.9 tok/s per stream and
   759 ms TTFT: the field report), and its share of a 12-hour night at the default schedule (one
   quiet-hour canary). With `--ledger PATH`, also the measured server seconds of that ledger's
   completed canaries.
2. The ledger: a ledger of `--records` records (a realistic fingerprint: 4 ranks x 40 rows and
   30 cluster rows; a canary of 2 levels x 6 repeats with a 40-row state sample every 5 records)
   is built, then one record and one canary are written with the production settings (WAL,
   synchronous FULL) `--writes` times each, and `why` is timed `--whys` times.

Usage: python bench/ledger_cost.py [--records 10000] [--ledger ~/.local/state/tpwarden/ledger/lab.sqlite]
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tpwarden.cluster.bench.canary_plan import CanaryOptions  # noqa: E402
from tpwarden.cluster.ledger.fingerprint import config_id  # noqa: E402
from tpwarden.cluster.ledger.store import Ledger  # noqa: E402
from tpwarden.cluster.ledger.tables import (  # noqa: E402
    KeyValue,
    LevelRow,
    NewCanary,
    NewRecord,
    RepeatRow,
)
from tpwarden.cluster.ledger.why import why  # noqa: E402

FIELD = {1: (12.7, 0.427), 4: (10.9, 0.759)}  # per-stream tok/s, TTFT s (the field report)
NIGHT_S = 12 * 3600.0
NODES = ("node1", "node2", "node3", "node4")


def canary_seconds(opts: CanaryOptions) -> tuple[float, dict[int, float]]:
    """Server seconds of one canary at the field's speeds: per level, runs x waves x (TTFT +
    output / per-stream speed), a wave being `level` requests at once."""
    per_level = {}
    for level in opts.levels:
        tok_s, ttft = FIELD.get(level, FIELD[max(FIELD)])
        waves = math.ceil(opts.num_prompts / level)
        per_level[level] = (opts.warmups + opts.repeats) * waves * (ttft + opts.output_len / tok_s)
    return sum(per_level.values()), per_level


def _rows(i: int) -> tuple[KeyValue, ...]:
    rows = [KeyValue(n, f"env.VAR_{k:02d}", f"value-{k}") for n in NODES for k in range(30)]
    rows += [KeyValue(n, f"flag.--flag-{k}", str(k)) for n in NODES for k in range(10)]
    rows += [KeyValue("*", f"setting.s{k}", str(k)) for k in range(29)]
    rows.append(KeyValue("*", "setting.generation", str(i // 50)))
    return tuple(rows)


def _canary(rng: random.Random, record_id: int, cfg: str, t: float) -> NewCanary:
    levels, reps = [], []
    for level, base in ((1, 12.6), (4, 41.4)):
        centre = base * math.exp(rng.gauss(0, 0.02))
        vals = [centre * math.exp(rng.gauss(0, 0.01)) for _ in range(6)]
        reps += [RepeatRow(level=level, repeat=r, warmup=r == 0, output_tok_s=v,
                           per_stream_tok_s=v / level, ttft_p50_ms=430.0, itl_p50_ms=185.0,
                           duration_s=20.0, completed=4) for r, v in enumerate(vals)]  # fmt: skip
        levels.append(LevelRow(level=level, output_tok_s=statistics.median(vals[1:]),
                               per_stream_tok_s=None, ttft_p50_ms=430.0, itl_p50_ms=185.0,
                               acceptance_pct=20.0, tokens_per_step=2.4, preemptions=0.0,
                               kv_usage_max=0.02, repeats=5))  # fmt: skip
    state = tuple(KeyValue(n, f"gpu.{k}", str(rng.randint(50, 70))) for n in NODES
                  for k in ("temp_c", "sm_clock_mhz", "power_w", "util_pct")) + tuple(
        KeyValue(n, f"cotenant.proc{k}.cpu_pct", "1.0") for n in NODES for k in range(6))  # fmt: skip
    return NewCanary(record_id=record_id, cluster="bench", cfg=cfg, definition="canary:bench",
                     started=t, finished=t + 170, status="ok", reason=None, trigger="schedule",
                     server_s=170.0, run_dir=None, doc={}, levels=tuple(levels),
                     repeats=tuple(reps), state=state)  # fmt: skip


def build(path: Path, records: int) -> float:
    """The big ledger, written through the store's own API (synchronous OFF while building)."""
    rng = random.Random(0)
    t0 = time.perf_counter()
    with Ledger.open(path) as led:
        led._conn.execute("PRAGMA synchronous = OFF")  # building only; timed writes use FULL
        for i in range(records):
            rows = _rows(i)
            cfg = config_id(rows)
            rec = led.add_record(NewRecord(ts=1e9 + i * 600.0, cluster="bench", cfg=cfg,
                                           spec_hash=None, action="up", reason="bench", who=None,
                                           run_dir=None, rows=rows))  # fmt: skip
            if i % 5 == 0:
                led.add_canary(_canary(rng, rec.id, cfg, 1e9 + i * 600.0 + 60))
    return time.perf_counter() - t0


def timed(fn, n: int) -> list[float]:  # noqa: ANN001
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=10_000)
    ap.add_argument("--writes", type=int, default=30)
    ap.add_argument("--whys", type=int, default=10)
    ap.add_argument("--ledger", type=Path, help="also: a real ledger's measured canary cost")
    args = ap.parse_args()

    opts = CanaryOptions()
    total, per_level = canary_seconds(opts)
    print("canary (default settings, field report speeds)")
    for level, s in per_level.items():
        print(f"  c={level}: {s:6.1f} server s ({opts.warmups} warm-up + {opts.repeats} repeats "
              f"of {opts.num_prompts} x {opts.output_len} tokens)")  # fmt: skip
    print(f"  per canary: {total:.0f} server s; one quiet-hour canary a 12 h night: "
          f"{100 * total / NIGHT_S:.2f} % (bound: 1 %)")  # fmt: skip
    if args.ledger:
        with Ledger.open(args.ledger, readonly=True) as led:
            done = [c.server_s for c in led.canaries() if c.status == "ok" and c.server_s]
        if done:
            print(f"  measured in {args.ledger}: median {statistics.median(done):.1f} server s "
                  f"over {len(done)} canaries")  # fmt: skip

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.sqlite"
        built = build(path, args.records)
        size = path.stat().st_size / 2**20
        print(f"\nledger: {args.records} records ({len(_rows(0))} fingerprint rows each), "
              f"{args.records // 5} canaries built in {built:.0f} s; {size:.0f} MiB")  # fmt: skip
        rng = random.Random(1)
        with Ledger.open(path) as led:  # production settings: WAL, synchronous FULL
            n = [args.records]

            def write_record() -> None:
                n[0] += 1
                rows = _rows(n[0])
                led.add_record(NewRecord(ts=2e9 + n[0], cluster="bench", cfg=config_id(rows),
                                         spec_hash=None, action="up", reason="bench", who=None,
                                         run_dir=None, rows=rows))  # fmt: skip

            w = timed(write_record, args.writes)
            latest = led.latest_record("bench")
            assert latest is not None
            c = timed(lambda: led.add_canary(_canary(rng, latest.id, latest.cfg, 3e9)), args.writes)
            y = timed(lambda: why(led, "bench"), args.whys)
        print(f"  write a record: median {1000 * statistics.median(w):.1f} ms, "
              f"max {1000 * max(w):.1f} ms (WAL, synchronous FULL, {args.writes} writes)")  # fmt: skip
        print(f"  write a canary: median {1000 * statistics.median(c):.1f} ms, "
              f"max {1000 * max(c):.1f} ms")  # fmt: skip
        print(f"  why:            median {1000 * statistics.median(y):.1f} ms, "
              f"max {1000 * max(y):.1f} ms (bound: 500 ms)")  # fmt: skip
        return 0 if max(y) <= 0.5 and total / NIGHT_S <= 0.01 else 1


if __name__ == "__main__":
    sys.exit(main())
