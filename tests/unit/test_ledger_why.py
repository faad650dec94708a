"""`ledger why`: the statistics (Student's t against tabulated quantiles, Welch), ten unchanged
canaries in a row "within noise" every time, the scripted regression (KV size lowered, clock
cap lowered, a co-tenant on node2) named and nothing else, controlled evidence ranked first,
"unrecorded cause" with when the drift began, and a ledger of 10,000 records read in time."""

from __future__ import annotations

import math
import random
import sqlite3
import time
from pathlib import Path

import pytest
from tpwarden.cluster.ledger import stats
from tpwarden.cluster.ledger.evidence import pair_evidence
from tpwarden.cluster.ledger.fingerprint import config_id
from tpwarden.cluster.ledger.store import Ledger
from tpwarden.cluster.ledger.tables import KeyValue, LevelRow, NewCanary, NewRecord, RepeatRow
from tpwarden.cluster.ledger.why import Verdict, why

NODES = ("node1", "node2", "node3", "node4")


@pytest.mark.parametrize(
    ("df", "q975"), [(1, 12.706), (4, 2.776), (10, 2.228), (30, 2.042), (math.inf, 1.960)]
)
def test_t_quantiles_match_the_table(df: float, q975: float) -> None:
    assert stats.t_ppf(0.975, df) == pytest.approx(q975, abs=1e-3)
    assert stats.t_cdf(q975, df) == pytest.approx(0.975, abs=1e-4)
    assert stats.t_cdf(0.0, df) == pytest.approx(0.5)
    assert stats.t_cdf(-q975, df) == pytest.approx(0.025, abs=1e-4)


def test_welch_on_equal_spreads_has_the_pooled_degrees_of_freedom() -> None:
    a = [1.0, 2.0, 3.0, 4.0, 5.0]
    b = [x + 10.0 for x in a]
    w = stats.welch(a, b)
    assert w is not None
    assert w.diff == pytest.approx(10.0) and w.df == pytest.approx(8.0)
    assert w.se == pytest.approx(1.0)  # sqrt(2.5/5 + 2.5/5)
    assert (w.lo, w.hi) == pytest.approx((10 - 2.306, 10 + 2.306), abs=1e-3)
    assert w.significant() and w.p < 1e-4
    same = stats.welch(a, a)
    assert same is not None and not same.significant() and same.p == pytest.approx(1.0)
    assert stats.welch([1.0], b) is None


def test_change_point_finds_the_shift() -> None:
    values = [3.0, 3.01, 2.99, 3.0, 3.02, 2.6, 2.61, 2.59, 2.6]
    assert stats.change_point(values) == 5
    assert stats.change_point([1.0, 2.0, 3.0]) is None  # too short for two per side


# --- ledger scenarios -------------------------------------------------------------------------

BASE: dict[tuple[str, str], str] = {
    **{(n, "flag.--kv-cache-memory-bytes"): str(16 * 2**30) for n in NODES},
    **{(n, "gpu.clock_cap_mhz"): "2000" for n in NODES},
    **{(n, "kernel"): "6.11.0-1016-nvidia" for n in NODES},
    ("*", "setting.kv_cache.memory"): str(16 * 2**30),
    ("*", "engine.kv.tokens"): "1200000",
    ("*", "engine.kv.num_gpu_blocks"): "4688",
    ("*", "vllm.version"): "0.33.0",
}
QUIET_STATE: dict[tuple[str, str], str] = {
    **{(n, "gpu.sm_clock_mhz"): "2000" for n in NODES},
    **{(n, "gpu.clock_event_reasons"): "[]" for n in NODES},
    **{(n, "gpu.temp_c"): "60" for n in NODES},
    **{(n, "gpu.power_w"): "41" for n in NODES},
    ("node1", "cotenant.sshd.cpu_pct"): "1.2",
}


class Lab:
    """A ledger driven like the cluster would: records when the server becomes healthy,
    canaries of one definition at level 1, each with 5 measured repeats and a state sample."""

    def __init__(self, path: Path, seed: int = 7) -> None:
        self.led = Ledger.open(path)
        self.rng = random.Random(seed)
        self.t = 1_000_000.0
        self.record_id = 0
        self.cfg = ""

    def record(self, rows: dict[tuple[str, str], str]) -> None:
        kv = tuple(KeyValue(n, k, v) for (n, k), v in sorted(rows.items()))
        self.cfg = config_id(kv)
        self.t += 60
        rec = self.led.add_record(NewRecord(
            ts=self.t, cluster="lab", cfg=self.cfg, spec_hash=None, action="up", reason="test",
            who=None, run_dir=None, rows=kv))  # fmt: skip
        self.record_id = rec.id

    def canary(self, tok_s: float, state: dict[tuple[str, str], str], *, between_sd: float = 0.02,
               within_sd: float = 0.01, acceptance: float = 20.0) -> int:  # fmt: skip
        centre = tok_s * math.exp(self.rng.gauss(0, between_sd))
        reps = [centre * math.exp(self.rng.gauss(0, within_sd)) for _ in range(5)]
        self.t += 3600
        rows = tuple(RepeatRow(level=1, repeat=i, warmup=False, output_tok_s=v,
                               per_stream_tok_s=v, ttft_p50_ms=420.0, itl_p50_ms=1000 / v,
                               duration_s=30.0, completed=4) for i, v in enumerate(reps))  # fmt: skip
        level = LevelRow(level=1, output_tok_s=stats.median(reps), per_stream_tok_s=None,
                         ttft_p50_ms=420.0, itl_p50_ms=1000 / centre, acceptance_pct=acceptance,
                         tokens_per_step=2.4, preemptions=0.0, kv_usage_max=0.01, repeats=5)  # fmt: skip
        cid = self.led.add_canary(NewCanary(
            record_id=self.record_id, cluster="lab", cfg=self.cfg, definition="def-ko", started=self.t,
            finished=self.t + 200, status="ok", reason=None, trigger="schedule", server_s=200.0,
            run_dir=None, doc={}, levels=(level,), repeats=rows,
            state=tuple(KeyValue(n, k, v) for (n, k), v in sorted(state.items()))))  # fmt: skip
        pair_evidence(self.led, cid, self.t)
        return cid


def test_ten_unchanged_canaries_are_within_noise_every_time(tmp_path: Path) -> None:
    lab = Lab(tmp_path / "l.sqlite")
    lab.record(BASE)
    lab.canary(12.6, QUIET_STATE)
    verdicts = []
    for _ in range(10):
        lab.canary(12.6, QUIET_STATE)
        rep = why(lab.led, "lab")
        verdicts.append(rep.verdict)
        assert not rep.differences, [d.subject for d in rep.differences]
    assert verdicts == [Verdict.WITHIN_NOISE] * 10
    assert rep.noise is not None and rep.noise.n == 10 and rep.noise.sd_pct is not None
    assert 0.5 < rep.noise.sd_pct < 5.0  # the spread of this configuration's canaries
    assert rep.ratio is not None and rep.lo is not None and rep.hi is not None


def _regression(lab: Lab) -> None:
    """The field report's three suspects at once: KV 16 -> 12 GiB by a rollout, the clock cap
    2000 -> 1500 MHz, a CPU-hungry co-tenant on node2."""
    lab.record(BASE)
    for _ in range(4):
        lab.canary(12.6, QUIET_STATE)
    changed = dict(BASE)
    for n in NODES:
        changed[(n, "flag.--kv-cache-memory-bytes")] = str(12 * 2**30)
        changed[(n, "gpu.clock_cap_mhz")] = "1500"
    changed[("*", "setting.kv_cache.memory")] = str(12 * 2**30)
    changed[("*", "engine.kv.tokens")] = "900000"
    changed[("*", "engine.kv.num_gpu_blocks")] = "3516"
    lab.record(changed)
    state = {**QUIET_STATE, **{(n, "gpu.sm_clock_mhz"): "1500" for n in NODES},
             ("node2", "cotenant.stress-ng.cpu_pct"): "187.5",
             **{(n, "gpu.temp_c"): "58" for n in NODES}}  # fmt: skip
    lab.canary(7.9, state)
    lab.canary(7.8, state)


def test_the_scripted_regression_names_kv_clock_cap_and_cotenant_and_nothing_else(
    tmp_path: Path,
) -> None:
    lab = Lab(tmp_path / "l.sqlite")
    _regression(lab)
    rep = why(lab.led, "lab")
    assert rep.verdict is Verdict.SLOWER
    assert rep.ratio is not None and rep.hi is not None and rep.hi < 0.75
    subjects = [d.subject for d in rep.differences]
    assert subjects == ["KV cache", "GPU clock cap", "co-tenant stress-ng"]
    kv, cap, cot = rep.differences
    assert kv.tier == cap.tier == cot.tier == "measured"  # the canary measured each
    assert kv.before == str(16 * 2**30) and kv.after == str(12 * 2**30)
    assert kv.revert == [{"set": "kv_cache.memory", "value": str(16 * 2**30)}]
    assert "KV tokens 1200000 -> 900000" in kv.measured
    assert cap.nodes == list(NODES) and cap.revert == [{"command": "tpwarden clocks cap 2000"}]
    assert any("SM clock under load 2000 -> 1500" in m for m in cap.measured)
    assert cot.nodes == ["node2"] and not cot.revertable and "stress-ng" in (cot.advice or "")
    assert not rep.unrecorded_cause


def test_controlled_evidence_ranks_first(tmp_path: Path) -> None:
    lab = Lab(tmp_path / "l.sqlite")
    lab.record(BASE)
    for _ in range(3):
        lab.canary(12.6, QUIET_STATE)
    # earlier: the kernel changed alone, and the canary measured it (x0.85): controlled
    newer = {**BASE, **{(n, "kernel"): "6.14.0-1001-nvidia" for n in NODES}}
    lab.record(newer)
    lab.canary(10.7, QUIET_STATE)
    ev = lab.led.evidence("lab")
    assert [(e.subject, e.source) for e in ev] == [("kernel and OS", "pair")]
    assert ev[0].hi is not None and ev[0].hi < 0.95
    # then the clocks: a cap without a kernel change, compared with the best (old kernel)
    lab.record({**newer, **{(n, "gpu.clock_cap_mhz"): "1500" for n in NODES}})
    lab.canary(8.0, {**QUIET_STATE, **{(n, "gpu.sm_clock_mhz"): "1500" for n in NODES}})
    rep = why(lab.led, "lab")
    assert rep.verdict is Verdict.SLOWER
    assert [(d.subject, d.tier) for d in rep.differences] == [
        ("kernel and OS", "controlled"),
        ("GPU clock cap", "measured"),
    ]
    assert rep.differences[0].evidence and "x0.8" in rep.differences[0].evidence


def test_a_slowdown_nothing_explains_is_an_unrecorded_cause_dated(tmp_path: Path) -> None:
    lab = Lab(tmp_path / "l.sqlite")
    lab.record(BASE)
    for _ in range(5):
        lab.canary(12.6, QUIET_STATE, between_sd=0.005)
    slow_from = lab.t + 3600
    for _ in range(3):
        lab.canary(10.0, QUIET_STATE, between_sd=0.005)
    rep = why(lab.led, "lab")
    assert rep.verdict is Verdict.SLOWER and rep.unrecorded_cause
    assert rep.drift is not None and rep.drift["began"] == slow_from


def test_no_canary_or_no_earlier_one_says_so(tmp_path: Path) -> None:
    lab = Lab(tmp_path / "l.sqlite")
    assert why(lab.led, "lab").verdict is Verdict.NO_CANARY
    lab.record(BASE)
    lab.canary(12.6, QUIET_STATE)
    rep = why(lab.led, "lab")
    assert rep.verdict is Verdict.NO_EARLIER and "first canary" in rep.notes[0]


def _bulk(path: Path, records: int, rows_per_record: int, every: int) -> None:
    """A big ledger fast: the schema by `Ledger.open`, the rows in one transaction (what
    `add_record`/`add_canary` write, minus their per-record fsync)."""
    Ledger.open(path).close()
    rng = random.Random(3)
    with sqlite3.connect(path) as c:
        cid = 0
        for rid in range(1, records + 1):
            cfg = f"cfg:{rid // 50:012d}"
            c.execute("INSERT INTO records (id, ts, cluster, cfg, action, reason, rows) VALUES "
                      "(?, ?, 'lab', ?, 'up', 'bulk', ?)", (rid, rid * 60.0, cfg, rows_per_record))  # fmt: skip
            c.executemany("INSERT INTO fingerprint VALUES (?, ?, ?, ?)",
                          [(rid, NODES[i % 4], f"key{i:03d}", str(rid // 50)) for i in range(rows_per_record)])  # fmt: skip
            if rid % every:
                continue
            cid += 1
            tok = 12.6 * math.exp(rng.gauss(0, 0.02))
            c.execute("INSERT INTO canaries (id, record_id, cluster, cfg, definition, started, status,"
                      " trigger) VALUES (?, ?, 'lab', ?, 'def-ko', ?, 'ok', 'schedule')",
                      (cid, rid, cfg, rid * 60.0 + 1))  # fmt: skip
            c.execute("INSERT INTO canary_levels (canary_id, level, output_tok_s, repeats) VALUES "
                      "(?, 1, ?, 5)", (cid, tok))  # fmt: skip
            c.executemany("INSERT INTO canary_repeats (canary_id, level, repeat, warmup, output_tok_s)"
                          " VALUES (?, 1, ?, 0, ?)", [(cid, r, tok * (1 + 0.01 * (r - 2))) for r in range(5)])  # fmt: skip


def test_why_reads_a_ledger_of_10000_records_in_half_a_second(tmp_path: Path) -> None:
    path = tmp_path / "l.sqlite"
    _bulk(path, 10_000, 40, every=5)
    lab = Lab(path)
    lab.record({**BASE, ("*", "setting.note"): "last"})
    lab.canary(8.0, {**QUIET_STATE, ("node2", "cotenant.stress-ng.cpu_pct"): "190"})
    assert len(lab.led.records("lab")) == 10_001
    t0 = time.perf_counter()
    rep = why(lab.led, "lab")
    took = time.perf_counter() - t0
    assert rep.verdict is Verdict.SLOWER
    assert took <= 0.5, f"why took {took:.2f}s on 10,000 records"
