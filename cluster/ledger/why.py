"""`ledger why`: is the latest canary slower than the best earlier one of the same canary, and
what differs between them, ranked.

1. The verdict: Welch's test on the log throughput of the two canaries' measured repeats gives
   the ratio (latest / best) with its 95 % interval. It is a slowdown only when that interval
   lies below 1 AND the latest median is outside the noise of the best one's configuration:
   below the one-sided 99.9 % prediction bound of that configuration's canaries (`noise_of`:
   their median and spread, in the stretch of their series that holds the best one; at least
   5 % and at most 15 % below their median; 10 % with fewer than 3 such canaries). The best of
   many earlier canaries sits high in their noise; measuring the latest against the
   configuration's own centre and spread keeps a server that did not change "within noise"
   canary after canary, and a drift after the best one does not widen it.
2. The differences (`differences`): the two records' fingerprints (one query), the two state
   samples (changes that matter only), and what the canary measured itself (acceptance,
   preemptions); grouped by subject and ranked: controlled evidence (`evidence` rows: an earlier
   pair of canaries where that subject changed alone, or an experiment), then what the canary
   measured, then the fixed prior (`subjects.CATEGORIES`).
3. Nothing differs: "unrecorded cause", with when the drift began in the latest configuration's
   series (`stats.change_point`).
"""

from __future__ import annotations

import enum
import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from tpwarden.cluster.durable import JSONObject
from tpwarden.cluster.ledger import stats
from tpwarden.cluster.ledger.differences import Difference, Tier, group, rank_key, state_matters
from tpwarden.cluster.ledger.store import Ledger
from tpwarden.cluster.ledger.tables import Change, Evidence, LevelRow, SeriesPoint

MIN_EFFECT = 0.05  # a change smaller than 5 % is never reported
UNKNOWN_NOISE = 0.10  # the band when the configuration has fewer than 3 canaries
MAX_BAND = 0.15  # the widest band a few noisy canaries give
MIN_NOISE_N = 3
ACCEPTANCE_POINTS = 5.0


class Verdict(enum.StrEnum):
    SLOWER = "slower"
    WITHIN_NOISE = "within noise"
    FASTER = "faster"
    NO_EARLIER = "no earlier canary"
    NO_CANARY = "no canary"


@dataclass(frozen=True)
class Noise:
    cfg: str | None
    n: int  # canaries of that configuration the noise is measured on
    sd_pct: float | None  # spread of their medians (log sd, as percent)
    band_pct: float  # how far below the configuration's mean is outside the noise
    centre_tok_s: float | None  # the median of those canaries


@dataclass(frozen=True, kw_only=True)
class WhyReport:
    cluster: str
    definition: str | None
    level: int
    verdict: Verdict
    latest: SeriesPoint | None = None
    best: SeriesPoint | None = None
    ratio: float | None = None
    lo: float | None = None
    hi: float | None = None
    p: float | None = None
    noise: Noise | None = None
    levels: JSONObject = field(default_factory=dict)  # best vs latest: TTFT, ITL, acceptance
    differences: tuple[Difference, ...] = ()
    drift: JSONObject | None = None  # unrecorded cause: when the drift began
    notes: tuple[str, ...] = ()

    @property
    def unrecorded_cause(self) -> bool:
        return self.verdict is Verdict.SLOWER and not self.differences

    def to_json(self) -> JSONObject:
        return {
            "cluster": self.cluster,
            "definition": self.definition,
            "level": self.level,
            "verdict": self.verdict.value,
            "latest": asdict(self.latest) if self.latest else None,
            "best": asdict(self.best) if self.best else None,
            "ratio": self.ratio,
            "ci95": [self.lo, self.hi] if self.ratio is not None else None,
            "p": self.p,
            "noise": asdict(self.noise) if self.noise else None,
            "levels": self.levels,
            "differences": [d.to_json() for d in self.differences],
            "unrecorded_cause": self.unrecorded_cause,
            "drift": self.drift,
            "notes": list(self.notes),
        }


def _measured_logs(led: Ledger, canary_id: int, level: int) -> list[float]:
    return stats.logs([r.output_tok_s for r in led.repeats(canary_id, level) if not r.warmup])


def regime(values: Sequence[float], at: int) -> tuple[int, int]:
    """The stretch [lo, hi) of `values` around index `at` with no significant level shift:
    the whole series, or the side of its change point that holds `at` when the two sides
    differ (Welch p < 0.001) by at least `MIN_EFFECT`."""
    cut = stats.change_point(values)
    if cut is None:
        return 0, len(values)
    w = stats.welch(values[:cut], values[cut:])
    if w is None or w.p >= 0.001 or abs(w.diff) < math.log1p(MIN_EFFECT):
        return 0, len(values)
    return (0, cut) if at < cut else (cut, len(values))


def noise_of(series: Sequence[SeriesPoint], best: SeriesPoint) -> Noise:
    """The noise of the best canary's configuration: its canaries before the latest, in the
    stretch of their series that holds the best one (`regime`: a drift after it is left out);
    their median is the centre, and a new canary is outside the noise below the one-sided
    99.9 % prediction bound, t(0.999, n-1) x sd x sqrt(1 + 1/n), at least `MIN_EFFECT` and at
    most `MAX_BAND` (few canaries give a wide bound); `UNKNOWN_NOISE` with fewer than 3."""
    same = [p for p in series if p.cfg == best.cfg]
    logs = [math.log(p.tok_s) for p in same]
    lo, hi = regime(logs, next(i for i, p in enumerate(same) if p.id == best.id))
    part = logs[lo:hi]
    n = len(part)
    sd = stats.sd(part) if n >= MIN_NOISE_N else None
    band = math.log1p(UNKNOWN_NOISE)
    if sd is not None:
        bound = stats.t_ppf(0.999, n - 1) * sd * math.sqrt(1.0 + 1.0 / n)
        band = min(max(math.log1p(MIN_EFFECT), bound), math.log1p(MAX_BAND))
    sd_pct = 100.0 * sd if sd is not None else None
    centre = math.exp(statistics.median(part))
    return Noise(best.cfg, n, sd_pct, 100.0 * (math.exp(band) - 1.0), centre)


def verdict_of(w: stats.Welch | None, latest: SeriesPoint, noise: Noise) -> Verdict:
    if w is None or noise.centre_tok_s is None:
        return Verdict.WITHIN_NOISE
    band = math.log1p(noise.band_pct / 100.0)
    offset = math.log(latest.tok_s) - math.log(noise.centre_tok_s)
    if w.hi < 0.0 and offset < -band:
        return Verdict.SLOWER
    if w.lo > 0.0 and offset > band:
        return Verdict.FASTER
    return Verdict.WITHIN_NOISE


def why(
    led: Ledger,
    cluster: str,
    *,
    level: int = 1,
    definition: str | None = None,
    before_id: int | None = None,
) -> WhyReport:
    """The latest completed canary at `level` against the best earlier one of its definition
    (`before_id`: as it stood before that canary, for the confirmation of a slowdown)."""
    if definition is None:
        last = led.canaries(cluster, status="ok", limit=1)
        if not last:
            return WhyReport(cluster=cluster, definition=None, level=level,
                             verdict=Verdict.NO_CANARY,
                             notes=("no completed canary yet: `tpwarden ledger canary`",))  # fmt: skip
        definition = last[0].definition
    series = led.series(cluster, definition, level)
    if before_id is not None:
        series = [p for p in series if p.id < before_id]
    if not series:
        return WhyReport(cluster=cluster, definition=definition, level=level,
                         verdict=Verdict.NO_CANARY,
                         notes=(f"no completed canary at concurrency {level}",))  # fmt: skip
    latest, earlier = series[-1], series[:-1]
    if not earlier:
        return WhyReport(cluster=cluster, definition=definition, level=level,
                         verdict=Verdict.NO_EARLIER, latest=latest,
                         notes=("this is the first canary of its kind: nothing earlier to "
                                "compare with",))  # fmt: skip
    best = max(earlier, key=lambda p: (p.tok_s, p.id))
    w = stats.welch(_measured_logs(led, best.id, level), _measured_logs(led, latest.id, level))
    noise = noise_of(earlier, best)
    verdict = verdict_of(w, latest, noise)
    diffs, levels = differences(led, cluster, best, latest, level, definition)
    drift = None
    if verdict is Verdict.SLOWER and not diffs:
        drift = drift_of(series, latest.cfg)
    return WhyReport(
        cluster=cluster, definition=definition, level=level, verdict=verdict, latest=latest,
        best=best, ratio=math.exp(w.diff) if w else latest.tok_s / best.tok_s,
        lo=math.exp(w.lo) if w else None, hi=math.exp(w.hi) if w else None,
        p=w.p if w else None, noise=noise, levels=levels, differences=tuple(diffs), drift=drift,
        notes=() if w else ("fewer than 2 measured repeats on a side: no interval",),
    )  # fmt: skip


def differences(
    led: Ledger, cluster: str, best: SeriesPoint, latest: SeriesPoint, level: int, definition: str
) -> tuple[list[Difference], JSONObject]:
    """Everything that differs between the two canaries, ranked (module docstring)."""
    config: list[Change] = []
    if (
        best.record_id is not None
        and latest.record_id is not None
        and best.record_id != latest.record_id
    ):
        config = led.diff(best.record_id, latest.record_id)
    state = [c for c in led.state_diff(best.id, latest.id) if state_matters(c)]
    diffs = group(config, "fingerprint") + group(state, "state")
    cb, cl = led.canary(best.id), led.canary(latest.id)
    lb = cb.levels.get(level) if cb else None
    ll = cl.levels.get(level) if cl else None
    diffs += _canary_only(lb, ll, {d.subject for d in diffs})
    by_subject = {d.subject: d for d in diffs}
    _measured(by_subject, config, state, lb, ll)
    _controlled(by_subject, led.evidence(cluster, list(by_subject)), definition, level)
    ranked = sorted(by_subject.values(), key=rank_key)
    return ranked, _level_pair(lb, ll)


def _canary_only(b: LevelRow | None, a: LevelRow | None, subjects: set[str]) -> list[Difference]:
    """What the canary measured with no recorded difference behind it."""
    out = []
    if b and a and b.acceptance_pct is not None and a.acceptance_pct is not None:
        moved = a.acceptance_pct - b.acceptance_pct
        if abs(moved) >= ACCEPTANCE_POINTS and "drafter" not in subjects:
            out.append(Difference(subject="drafter acceptance", category="serving settings",
                                  before=f"{b.acceptance_pct:.0f}%", after=f"{a.acceptance_pct:.0f}%",
                                  source="canary", tier=Tier.MEASURED, magnitude=abs(moved)))  # fmt: skip
    if (
        b
        and a
        and (a.preemptions or 0) > 0
        and not (b.preemptions or 0)
        and "KV cache" not in subjects
    ):
        out.append(Difference(subject="preemptions", category="serving settings",
                              before=str(int(b.preemptions or 0)), after=str(int(a.preemptions or 0)),
                              source="canary", tier=Tier.MEASURED, magnitude=a.preemptions or 0))  # fmt: skip
    return out


def _measured(
    by: dict[str, Difference], config: list[Change], state: list[Change],
    b: LevelRow | None, a: LevelRow | None,
) -> None:  # fmt: skip
    """Attach what the canary measured to the subjects it is about; such a subject ranks above
    the prior."""
    kv = by.get("KV cache")
    if kv is not None:
        for c in config:
            if c.key == "engine.kv.tokens":
                kv.measured.append(f"KV tokens {c.before} -> {c.after}")
                kv.tier = Tier.MEASURED
                kv.magnitude = _rel(c.before, c.after)
        if b and a and (a.preemptions or 0) > (b.preemptions or 0):
            kv.measured.append(
                f"preemptions {int(b.preemptions or 0)} -> {int(a.preemptions or 0)}"
            )
            kv.tier = Tier.MEASURED
    clocks = by.pop("GPU clocks under load", None)
    cap = by.get("GPU clock cap") or by.get("GPU power limit")
    seen: dict[tuple[str, str | None, str | None], list[str]] = {}
    for c in state:
        if c.key.endswith(("sm_clock_mhz", "clock_event_reasons")):
            what = "SM clock under load" if c.key.endswith("sm_clock_mhz") else "clock events"
            seen.setdefault((what, c.before, c.after), []).append(c.node)
    target = cap or clocks or (_add(by, state) if seen else None)
    for (what, before, after), nodes in seen.items():
        assert target is not None
        unit = " MHz" if what.startswith("SM") else ""
        target.measured.append(f"{what} {before} -> {after}{unit} on {', '.join(nodes)}")
    if target is not None and target.measured:
        target.tier = Tier.MEASURED
        target.magnitude = max(target.magnitude, len(seen))
        if cap is None:
            by[target.subject] = target
    for d in by.values():
        if d.source == "state" and d.subject.startswith(("co-tenant", "GPU users")):
            d.tier = Tier.MEASURED
            d.measured.append(f"CPU on {', '.join(d.nodes)}: {d.before or 0}% -> {d.after or 0}% of a core"
                              if d.subject.startswith("co-tenant") else f"{d.before} -> {d.after}")  # fmt: skip
            d.magnitude = _rel(d.before or "0", d.after or "0")
    drafter = by.get("drafter")
    if (
        drafter is not None
        and b
        and a
        and b.acceptance_pct is not None
        and a.acceptance_pct is not None
    ):
        drafter.measured.append(f"acceptance {b.acceptance_pct:.0f}% -> {a.acceptance_pct:.0f}%")
        if abs(a.acceptance_pct - b.acceptance_pct) >= ACCEPTANCE_POINTS:
            drafter.tier = Tier.MEASURED


def _add(by: dict[str, Difference], state: list[Change]) -> Difference:
    """The measured-only difference of the clocks (no cap or power limit changed)."""
    rows = [c for c in state if c.key.endswith(("sm_clock_mhz", "clock_event_reasons"))]
    d = Difference(subject="GPU clocks under load", category="clocks and power", source="state",
                   nodes=sorted({c.node for c in rows}), keys=sorted({c.key for c in rows}))  # fmt: skip
    by[d.subject] = d
    return d


def _rel(before: str | None, after: str | None) -> float:
    try:
        a, b = float(before or 0), float(after or 0)
    except ValueError:
        return 0.0
    return abs(b - a) / max(abs(a), abs(b), 1e-9)


def _controlled(
    by: dict[str, Difference], evidence: Sequence[Evidence], definition: str, level: int
) -> None:
    """An earlier pair (or an experiment) where the subject changed alone: the strongest kind."""
    for ev in evidence:
        d = by.get(ev.subject)
        if d is None or ev.definition != definition or ev.level != level:
            continue
        strength = abs(math.log(ev.ratio)) if ev.ratio > 0 else 0.0
        if d.tier == Tier.CONTROLLED and strength <= d.magnitude:
            continue
        d.tier, d.magnitude = Tier.CONTROLLED, strength
        d.ratio, d.lo, d.hi = ev.ratio, ev.lo, ev.hi
        ci = f" [{ev.lo:.2f}, {ev.hi:.2f}]" if ev.lo is not None and ev.hi is not None else ""
        d.evidence = (f"{ev.source}: {ev.before} -> {ev.after} alone moved throughput "
                      f"x{ev.ratio:.2f}{ci}")  # fmt: skip


def _level_pair(b: LevelRow | None, a: LevelRow | None) -> JSONObject:
    keys = ("output_tok_s", "ttft_p50_ms", "itl_p50_ms", "acceptance_pct", "preemptions",
            "kv_usage_max")  # fmt: skip
    return {k: {"best": getattr(b, k) if b else None, "latest": getattr(a, k) if a else None}
            for k in keys}  # fmt: skip


def drift_of(series: Sequence[SeriesPoint], cfg: str | None) -> JSONObject:
    """When the latest configuration's throughput shifted: the last canary before the shift
    and the first after it (None when its series is too short or shows no shift)."""
    same = [p for p in series if p.cfg == cfg]
    if len(same) < 4:
        return {"began": None, "canaries": len(same),
                "note": "fewer than 4 canaries of this configuration: cannot date the drift"}  # fmt: skip
    at = stats.change_point(stats.logs([p.tok_s for p in same]))
    if at is None:
        return {"began": None, "canaries": len(same), "note": "no shift found in its series"}
    return {"began": same[at].started, "after": same[at - 1].started, "canaries": len(same),
            "first_slow": same[at].id, "last_fast": same[at - 1].id}  # fmt: skip


@dataclass(frozen=True)
class Slowdown:
    """The alert's view of one level: the latest ratio and whether the last two canaries were
    both slower beyond noise (a slowdown confirmed by two in a row)."""

    level: int
    ratio: float | None
    verdict: Verdict
    confirmed: bool


def slowdown(led: Ledger, cluster: str, level: int) -> Slowdown:
    """`why` for the latest canary and for the one before it."""
    latest = why(led, cluster, level=level)
    if latest.verdict is not Verdict.SLOWER or latest.latest is None:
        return Slowdown(level, latest.ratio, latest.verdict, False)
    before = why(
        led, cluster, level=level, definition=latest.definition, before_id=latest.latest.id
    )
    return Slowdown(level, latest.ratio, latest.verdict, before.verdict is Verdict.SLOWER)
