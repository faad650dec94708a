"""The morning report: "how did the night go", from the files the night left behind.

One answer assembled from the watchdog's event log (probes, decisions, restarts), the thermal
agents' samples (through the one thermal report, ``reports.thermal.report``) and the bench
runs (and `tune drafter` runs: morning_tune) that started in the window. Pure: records in, a frozen report out; reading files lives in
``morning_io``, HTML and plots in ``morning_html``. Counts here are counts of records, so a test
can recompute each one from the raw files.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime

from tpwarden.cluster.durable import JSONObject, JSONValue
from tpwarden.cluster.reports.morning_ledger import CanarySummary
from tpwarden.cluster.reports.morning_tune import TuneSummary
from tpwarden.cluster.reports.thermal.report import FieldReport, build_report, report_to_json

ANSWERING = ("ok", "busy")  # probe verdicts that mean the server answered or made progress
PROBE_GAP_FACTOR = 2.5  # probe records further apart than this many median intervals: a gap
BENCH_FIELDS = (
    "level", "aggregate_tok_s", "per_stream_tok_s", "ttft_p50_ms", "itl_p50_ms",
    "acceptance_pct", "tokens_per_step", "prefill_tok_s",
)  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class RestartRow:
    ts: float
    by: str  # "watchdog" or who restarted it by hand
    cause: str  # probe_failures | boot_deadline | operator
    reason: str
    ok: bool | None  # None: no end record (still restarting when the window closed)
    error: str | None = None
    back_after_s: float | None = None  # restart begin -> first answering probe
    false_candidate: bool = False  # the engine was making progress when it was restarted
    why_candidate: str | None = None
    restart_id: str | None = None
    suspect: str | None = None  # the incident dossier's verdict (issue 32), when one was taken
    incident_id: str | None = None


@dataclass(frozen=True, kw_only=True)
class WatchdogSummary:
    probes: int
    verdicts: dict[str, int]  # ok / busy / stalled / hard_fail / misconfig / unknown
    decisions: dict[str, int]  # count_failure / reset_failures / alert / hold / give_up / wait
    restarts: tuple[RestartRow, ...]
    alerts: tuple[JSONObject, ...]
    holds: int
    answering_pct: float | None  # share of probes that answered (ok or busy)
    probe_gaps: tuple[tuple[float, float], ...]  # stretches with no probe record
    skipped_lines: int = 0

    @property
    def false_restart_candidates(self) -> int:
        return sum(1 for r in self.restarts if r.false_candidate)


@dataclass(frozen=True, kw_only=True)
class BenchSummary:
    run_id: str
    kind: str
    started_at: float
    config_hash: str | None
    drafter_k: JSONValue
    rows: tuple[JSONObject, ...]


EVAL_FIELDS = ("task", "path", "n", "metric", "score", "stderr")


@dataclass(frozen=True, kw_only=True)
class EvalSummary:
    run_id: str
    started_at: float
    finished: bool  # False: still running (or killed) when the report was made
    thinking: JSONValue  # the server's chat-template default the run measured under
    restarts: int  # server restarts the run waited out and resumed after
    rows: tuple[JSONObject, ...]  # EVAL_FIELDS + previous, delta_points (vs the last run)
    suite: str | None = None  # `eval run --suite` (e.g. "field")


@dataclass(frozen=True, kw_only=True)
class MorningReport:
    since: float
    until: float
    watchdog: WatchdogSummary
    thermal: FieldReport
    bench: tuple[BenchSummary, ...]
    notes: tuple[str, ...] = field(default_factory=tuple)
    evals: tuple[EvalSummary, ...] = ()
    tunes: tuple[TuneSummary, ...] = ()  # `tune drafter` runs (morning_tune)
    canaries: tuple[CanarySummary, ...] = ()  # the ledger's canaries (morning_ledger)

    @property
    def hours(self) -> float:
        return (self.until - self.since) / 3600.0

    @property
    def throttle_episodes(self) -> int:
        return sum(n.throttle.episodes for n in self.thermal.nodes)


def _in(ts: JSONValue, since: float | None, until: float | None) -> bool:
    return (
        isinstance(ts, int | float)
        and (since is None or ts >= since)
        and (until is None or ts <= until)
    )


def _token_counters(probe: Mapping[str, JSONValue]) -> dict[str, float]:
    values = ((probe.get("metrics") or {}).get("values")) or {}
    return {k: v for k, v in values.items() if k.endswith("tokens_total")}


def _progress_before(probes: Sequence[Mapping[str, JSONValue]], at: float) -> str | None:
    """Did the engine make progress during the failure streak that ended in a restart at
    ``at``? Token counters that grew between the streak's first and last probe say it was
    busy, not hung: a false restart candidate."""
    streak: list[Mapping[str, JSONValue]] = []
    for p in probes:
        if p["ts"] > at:
            break
        if p.get("verdict") in ANSWERING:
            streak = []
        else:
            streak.append(p)
    if len(streak) < 2:
        return None
    first, last = _token_counters(streak[0]), _token_counters(streak[-1])
    grew = [k for k in last if k in first and last[k] > first[k]]
    if grew:
        return f"{', '.join(sorted(grew))} grew during the failure streak"
    return None


def _incident_of(inc: Mapping[str, JSONValue] | None) -> JSONObject:
    """What a watchdog restart's ``incident_dossier`` event says: the verdict's summary (or
    "no dossier: why") and the dossier's id."""
    if not isinstance(inc, Mapping):
        return {}
    if inc.get("error"):
        return {"suspect": f"no dossier: {inc['error']}"}
    return {"suspect": inc.get("summary") or inc.get("suspect"), "incident_id": inc.get("id")}


def summarize_watchdog(
    events: Iterable[Mapping[str, JSONValue]],
    operator_restarts: Iterable[Mapping[str, JSONValue]] = (),
    since: float | None = None,
    until: float | None = None,
    skipped_lines: int = 0,
) -> WatchdogSummary:
    """Watchdog event records (events.jsonl) -> counts, restarts with causes, alerts, gaps.
    ``operator_restarts``: cluster control's restart records made by people (not the
    watchdog), already with a numeric ``ts``."""
    evs = sorted((e for e in events if _in(e.get("ts"), since, until)), key=lambda e: e["ts"])
    probes = [e for e in evs if e.get("kind") == "probe"]
    verdicts = Counter(str(p.get("verdict") or "unknown") for p in probes)
    decisions = Counter(str(e.get("decision")) for e in evs if e.get("kind") == "decision")
    ends = {e.get("restart_id"): e for e in evs if e.get("kind") == "restart_end"}
    dossiers = {e.get("restart_id"): e for e in evs if e.get("kind") == "incident_dossier"}
    restarts: list[RestartRow] = []
    for e in (e for e in evs if e.get("kind") == "restart_begin"):
        end = ends.get(e.get("restart_id"))
        back = next(
            (p["ts"] for p in probes if p["ts"] > e["ts"] and p.get("verdict") in ANSWERING), None
        )
        why = _progress_before(probes, e["ts"])
        restarts.append(
            RestartRow(
                ts=e["ts"], by="watchdog", cause=str(e.get("cause") or "unknown"),
                reason=str(e.get("reason") or ""), ok=None if end is None else bool(end.get("ok")),
                error=None if end is None else end.get("error"),
                back_after_s=None if back is None else round(back - e["ts"], 3),
                false_candidate=why is not None, why_candidate=why,
                restart_id=e.get("restart_id"),
                **_incident_of(dossiers.get(e.get("restart_id"))),
            )
        )  # fmt: skip
    for r in operator_restarts:
        if not _in(r.get("ts"), since, until):
            continue
        back = next(
            (p["ts"] for p in probes if p["ts"] > r["ts"] and p.get("verdict") in ANSWERING), None
        )
        restarts.append(
            RestartRow(
                ts=r["ts"], by=str(r.get("who") or "operator"), cause="operator",
                reason=str(r.get("why") or ""), ok=r.get("ok"),
                back_after_s=None if back is None else round(back - r["ts"], 3),
            )
        )  # fmt: skip
    alerts = tuple(
        {"ts": e["ts"], "category": e.get("category"), "message": e.get("message")}
        for e in evs
        if e.get("kind") == "decision" and e.get("decision") == "alert"
    )
    answering = sum(verdicts[v] for v in ANSWERING)
    return WatchdogSummary(
        probes=len(probes),
        verdicts=dict(sorted(verdicts.items())),
        decisions=dict(sorted(decisions.items())),
        restarts=tuple(sorted(restarts, key=lambda r: r.ts)),
        alerts=alerts,
        holds=sum(1 for e in evs if e.get("kind") == "hold_set"),
        answering_pct=round(100.0 * answering / len(probes), 2) if probes else None,
        probe_gaps=tuple(probe_gaps([p["ts"] for p in probes])),
        skipped_lines=skipped_lines,
    )


def probe_gaps(ts: Sequence[float]) -> list[tuple[float, float]]:
    """Stretches where the watchdog wrote no probe record (it was down or stuck)."""
    if len(ts) < 3:
        return []
    step = statistics.median(b - a for a, b in zip(ts, ts[1:], strict=False))
    return [
        (a, b)
        for a, b in zip(ts, ts[1:], strict=False)
        if step > 0 and b - a > PROBE_GAP_FACTOR * step
    ]


def iso_ts(text: JSONValue) -> float | None:
    if isinstance(text, int | float):
        return float(text)
    try:
        return datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _is_eval(manifest: Mapping[str, JSONValue], table: Mapping[str, JSONValue]) -> bool:
    return "eval" in (manifest.get("kind"), table.get("kind"))


def summarize_evals(
    runs: Iterable[tuple[Mapping[str, JSONValue], Mapping[str, JSONValue]]],
    since: float | None = None,
    until: float | None = None,
) -> tuple[EvalSummary, ...]:
    """`tpwarden eval` run directories (same runs dir as bench) that started in the window,
    each task's score beside the previous run's (any earlier eval run, same task and path)."""
    evals = sorted(
        ((iso_ts(m.get("started_at")), m, t) for m, t in runs if _is_eval(m, t)),
        key=lambda e: e[0] or 0.0,
    )
    out = []
    for i, (started, manifest, table) in enumerate(evals):
        if started is None or not _in(started, since, until):
            continue
        earlier = [t for _, _, t in evals[:i]]
        rows = tuple(_with_previous(r, earlier) for r in table.get("rows") or [])
        out.append(
            EvalSummary(
                run_id=str(manifest.get("run_id")), started_at=started,
                finished=manifest.get("finished_at") is not None,
                thinking=(manifest.get("server_defaults") or {}).get("thinking"),
                restarts=len(manifest.get("restarts") or ()), rows=rows,
                suite=(manifest.get("options") or {}).get("suite"),
            )
        )  # fmt: skip
    return tuple(out)


def _with_previous(
    row: Mapping[str, JSONValue], earlier: list[Mapping[str, JSONValue]]
) -> JSONObject:
    out = {k: row.get(k) for k in EVAL_FIELDS}
    prev = None
    for table in reversed(earlier):
        match = [r for r in table.get("rows") or [] if r.get("task") == row.get("task")]
        if match and match[0].get("path") == row.get("path"):
            prev = match[0].get("score")
            break
    score = row.get("score")
    out["previous"] = prev
    out["delta_points"] = None
    if isinstance(prev, (int, float)) and isinstance(score, (int, float)):
        out["delta_points"] = 100.0 * (score - prev)
    return out


def summarize_bench(
    runs: Iterable[tuple[Mapping[str, JSONValue], Mapping[str, JSONValue]]],
    since: float | None = None,
    until: float | None = None,
) -> tuple[BenchSummary, ...]:
    """(manifest, table) of each bench run directory -> the runs that started in the window."""
    out = []
    for manifest, table in runs:
        if _is_eval(manifest, table):
            continue  # an eval run: summarize_evals
        started = iso_ts(manifest.get("started_at"))
        if started is None or not _in(started, since, until):
            continue
        defaults = manifest.get("server_defaults") or {}
        rows = tuple({k: r.get(k) for k in BENCH_FIELDS if k in r} for r in table.get("rows") or [])
        out.append(
            BenchSummary(
                run_id=str(manifest.get("run_id")), kind=str(manifest.get("kind") or table.get("kind")),
                started_at=started, config_hash=(manifest.get("cluster") or {}).get("config_hash"),
                drafter_k=defaults.get("drafter_k"), rows=rows,
            )
        )  # fmt: skip
    return tuple(sorted(out, key=lambda b: b.started_at))


def build_morning(
    events: Iterable[Mapping[str, JSONValue]],
    thermal_records: Iterable[Mapping[str, JSONValue]],
    bench_runs: Iterable[tuple[Mapping[str, JSONValue], Mapping[str, JSONValue]]] = (),
    *,
    since: float | None = None,
    until: float | None = None,
    roles: Mapping[str, str] | None = None,
    zone_roles: Mapping[str, str] | None = None,
    operator_restarts: Iterable[Mapping[str, JSONValue]] = (),
    skipped_lines: int = 0,
    tune_runs: Iterable[TuneSummary] = (),
    canaries: Iterable[CanarySummary] = (),
) -> MorningReport:
    """Everything in the window [since, until]; without bounds, the data's own extent."""
    events = list(events)
    recs = list(thermal_records)
    stamps = [e["ts"] for e in events if isinstance(e.get("ts"), int | float)]
    stamps += [r["ts"] for r in recs if isinstance(r.get("ts"), int | float)]
    lo = since if since is not None else (min(stamps) if stamps else 0.0)
    hi = until if until is not None else (max(stamps) if stamps else lo)
    wd = summarize_watchdog(events, operator_restarts, lo, hi, skipped_lines)
    thermal = build_report(recs, since=lo, until=hi, roles=roles, zone_roles=zone_roles)
    notes = []
    if not wd.probes:
        notes.append("no watchdog probe records in the window (was the watchdog running?)")
    if not any(n.samples_received for n in thermal.nodes):
        notes.append("no thermal samples in the window (were the agents running?)")
    runs = list(bench_runs)
    return MorningReport(
        since=lo, until=hi, watchdog=wd, thermal=thermal, bench=summarize_bench(runs, lo, hi), notes=tuple(notes),
        evals=summarize_evals(runs, lo, hi),
        tunes=tuple(sorted((t for t in tune_runs if _in(t.started_at, lo, hi)), key=lambda t: t.started_at)),
        canaries=tuple(c for c in canaries if _in(c.started, lo, hi)),
    )  # fmt: skip


def headline(rep: MorningReport) -> str:
    """The field report's one-line summary: hours, crashes, false restarts, throttling."""
    wd = rep.watchdog
    watchdog_restarts = sum(1 for r in wd.restarts if r.by == "watchdog")
    parts = [
        f"{rep.hours:.1f} h",
        f"{watchdog_restarts} watchdog restart(s)",
        f"{wd.false_restart_candidates} false restart candidate(s)",
        *(
            [f"{len(wd.restarts) - watchdog_restarts} operator restart(s)"]
            if len(wd.restarts) > watchdog_restarts
            else []
        ),  # fmt: skip
        f"{rep.throttle_episodes} throttle episode(s)",
    ]
    if wd.answering_pct is not None:
        parts.append(f"answering {wd.answering_pct:g}% of {wd.probes} probes")
    return ", ".join(parts)


def morning_to_json(rep: MorningReport) -> JSONObject:
    wd = asdict(rep.watchdog)
    wd["false_restart_candidates"] = rep.watchdog.false_restart_candidates
    return {
        "since": rep.since,
        "until": rep.until,
        "hours": round(rep.hours, 3),
        "headline": headline(rep),
        "watchdog": wd,
        "thermal": report_to_json(rep.thermal),
        "throttle_episodes": rep.throttle_episodes,
        "bench": [asdict(b) for b in rep.bench],
        "eval": [asdict(e) for e in rep.evals],
        "tune": [asdict(t) for t in rep.tunes],
        "canaries": [c.to_json() for c in rep.canaries],
        "notes": list(rep.notes),
    }
