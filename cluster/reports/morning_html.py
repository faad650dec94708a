"""The morning report as one HTML page (PNG plot embedded, no external files) and the rows
that the terminal and the page share. Pure: report in, strings out; times in the chosen zone."""

from __future__ import annotations

import base64
from datetime import tzinfo
from html import escape

from tpwarden.cluster.durable import JSONValue
from tpwarden.cluster.reports.morning import MorningReport, headline
from tpwarden.cluster.reports.morning_ledger import canary_lines
from tpwarden.cluster.reports.morning_tune import tune_line
from tpwarden.cluster.reports.thermal.localtime import local, span_text

DASH = "-"


def _c(v: float | None) -> str:
    return DASH if v is None else f"{v:.1f}\u00a0°C"  # no line break inside "82.0 °C"


def _n(v: JSONValue, fmt: str = "{:.1f}") -> str:
    if v is None:
        return DASH
    try:
        return fmt.format(v)
    except (TypeError, ValueError):
        return str(v)


def restart_rows(rep: MorningReport, tz: tzinfo) -> list[list[str]]:
    rows = []
    for r in rep.watchdog.restarts:
        result = "running" if r.ok is None else ("ok" if r.ok else f"failed: {r.error or '?'}")
        back = DASH if r.back_after_s is None else f"{r.back_after_s / 60:.1f} min"
        rows.append(
            [local(r.ts, tz, "%H:%M:%S"), r.by, r.cause, r.reason, result, back,
             r.why_candidate or "no", r.suspect or DASH]
        )  # fmt: skip
    return rows


RESTART_HEAD = [
    "time", "by", "cause", "reason", "result", "answering again after", "false?", "suspect",
]  # fmt: skip


def thermal_rows(rep: MorningReport, tz: tzinfo) -> list[list[str]]:
    rows = []
    for n in rep.thermal.nodes:
        hz = n.hottest_zone
        rows.append(
            [
                n.node, n.role, f"{n.samples_received}/{n.samples_expected}",
                _c(n.gpu_peak_c) if n.gpu_peak_c is not None
                else f"- ({n.null_reasons.get('gpu_peak_c', '?')})",
                DASH if hz is None else f"{_c(hz.peak_c)} {hz.role or hz.zone}",
                _c(n.min_margin_c),
                f"{n.throttle.episodes} ({n.throttle.duration_s:g} s)" if n.throttle.episodes
                else "none",
                str(len(n.gaps)) if n.gaps else "none",
            ]
        )  # fmt: skip
    return rows


THERMAL_HEAD = ["node", "role", "samples", "GPU peak", "hottest zone", "margin to critical",
                "throttle", "gaps"]  # fmt: skip


def role_table(rep: MorningReport) -> tuple[list[str], list[list[str]]]:
    """Peak per zone role (or zone, without a role map) per node, with margin to critical."""
    labels = sorted({k for n in rep.thermal.nodes for k in n.role_peaks})
    rows = []
    for n in rep.thermal.nodes:
        cells = [n.node]
        for label in labels:
            v = n.role_peaks.get(label) or {}
            m = v.get("margin_c")
            cells.append(_c(v.get("peak_c")) + ("" if m is None else f" ({m:.0f} to crit)"))
        rows.append(cells)
    return ["node", *labels], rows


def bench_rows(rep: MorningReport, tz: tzinfo) -> list[list[str]]:
    rows = []
    for b in rep.bench:
        for r in b.rows:
            rows.append(
                [local(b.started_at, tz, "%H:%M"), b.run_id, b.kind, _n(b.drafter_k, "{}"),
                 _n(r.get("level"), "{}"), _n(r.get("aggregate_tok_s")),
                 _n(r.get("per_stream_tok_s")), _n(r.get("ttft_p50_ms"), "{:,.0f}"),
                 _n(r.get("itl_p50_ms"), "{:,.0f}"), _n(r.get("acceptance_pct"), "{:.0f}%"),
                 _n(r.get("tokens_per_step"), "{:.2f}")]
            )  # fmt: skip
    return rows


BENCH_HEAD = ["started", "run", "kind", "k", "c", "aggregate tok/s", "per stream tok/s",
              "TTFT p50 ms", "ITL p50 ms", "acceptance", "tokens/step"]  # fmt: skip
EVAL_HEAD = ["started", "run", "suite", "thinking", "restarts", "task", "path", "n", "score",
             "stderr", "previous", "Δ points"]  # fmt: skip


def eval_rows(rep: MorningReport, tz: tzinfo) -> list[list[str]]:
    rows = []
    for e in rep.evals:
        state = "" if e.finished else " (unfinished)"
        for r in e.rows or ({},):
            rows.append(
                [local(e.started_at, tz, "%H:%M"), e.run_id + state, _n(e.suite, "{}"),
                 _n(e.thinking, "{}"), str(e.restarts), _n(r.get("task"), "{}"),
                 _n(r.get("path"), "{}"), _n(r.get("n"), "{}"), _n(r.get("score"), "{:.4f}"),
                 _n(r.get("stderr"), "{:.4f}"), _n(r.get("previous"), "{:.4f}"),
                 _n(r.get("delta_points"), "{:+.1f}")]
            )  # fmt: skip
    return rows


TUNE_HEAD = ["started", "run", "tuning"]


def tune_rows(rep: MorningReport, tz: tzinfo) -> list[list[str]]:
    return [[local(t.started_at, tz, "%H:%M"), t.run_id, tune_line(t)] for t in rep.tunes]


def gap_lines(rep: MorningReport, tz: tzinfo) -> list[str]:
    out = []
    for a, b in rep.watchdog.probe_gaps:
        out.append(f"watchdog: no probe {local(a, tz, '%H:%M:%S')} - {local(b, tz, '%H:%M:%S')}")
    for n in rep.thermal.nodes:
        for g in n.gaps:
            out.append(
                f"{n.node} thermal: {local(g.start, tz, '%H:%M:%S')} - "
                f"{local(g.end, tz, '%H:%M:%S')} ({g.duration_s:.0f} s, {g.kind})"
            )
    return out


def _table(head: list[str], rows: list[list[str]]) -> str:
    th = "".join(f"<th>{escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{th}</tr>{body}</table>" if rows else "<p>none</p>"


CSS = (
    "body{font-family:system-ui,sans-serif;max-width:1100px;margin:1em auto;padding:0 1em}"
    "table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:2px 6px;"
    "text-align:left}th{background:#f3f3f3}h1{font-size:1.4em}h2{font-size:1.1em;margin-top:1.2em}"
    "img{max-width:100%}.head{font-size:1.1em;font-weight:600}"
)


def morning_html(rep: MorningReport, tz: tzinfo, plot_png: bytes | None = None) -> str:
    wd = rep.watchdog
    verdicts = ", ".join(f"{k} {v}" for k, v in wd.verdicts.items()) or "none"
    decisions = ", ".join(f"{k} {v}" for k, v in wd.decisions.items()) or "none"
    role_head, role_rows = role_table(rep)
    parts = [
        f"<h1>Night report, {escape(span_text(rep.since, rep.until, tz))}</h1>",
        f"<p class=head>{escape(headline(rep))}</p>",
        *(f"<p><b>note:</b> {escape(n)}</p>" for n in rep.notes),
        "<h2>Server and watchdog</h2>",
        f"<p>probes {wd.probes}: {escape(verdicts)}; decisions: {escape(decisions)}; "
        f"holds {wd.holds}; false restart candidates {wd.false_restart_candidates}</p>",
        _table(RESTART_HEAD, restart_rows(rep, tz)),
        "<h2>Alerts</h2>",
        _table(
            ["time", "category", "message"],
            [
                [local(a["ts"], tz, "%H:%M:%S"), str(a["category"]), str(a["message"])]
                for a in wd.alerts
            ],
        ),  # fmt: skip
        "<h2>Thermal</h2>",
        _table(THERMAL_HEAD, thermal_rows(rep, tz)),
        "<h3>Peak per zone role</h3>",
        _table(role_head, role_rows),
    ]
    if plot_png:
        data = base64.b64encode(plot_png).decode()
        parts.append(f'<img alt="thermal plot" src="data:image/png;base64,{data}">')
    parts += [
        "<h2>Gaps</h2>",
        "<ul>" + "".join(f"<li>{escape(g)}</li>" for g in gap_lines(rep, tz)) + "</ul>"
        if gap_lines(rep, tz)
        else "<p>none</p>",
        "<h2>Benchmarks in the window</h2>",
        _table(BENCH_HEAD, bench_rows(rep, tz)),
        "<h2>Evaluations in the window</h2>",
        _table(EVAL_HEAD, eval_rows(rep, tz)),
        "<h2>Draft-length tuning in the window</h2>",
        _table(TUNE_HEAD, tune_rows(rep, tz)),
        "<h2>Canaries (the configuration ledger)</h2>",
        "<ul>"
        + "".join(
            f"<li>{escape(x)}</li>"
            for x in canary_lines(rep.canaries, lambda ts: local(ts, tz, "%H:%M"))
        )
        + "</ul>",
    ]
    return (
        "<!doctype html><html><head><meta charset=utf-8>"
        f"<title>tpwarden night report</title><style>{CSS}</style></head><body>"
        + "\n".join(parts)
        + "</body></html>\n"
    )


def text_lines(rep: MorningReport, tz: tzinfo) -> list[str]:
    """The report for a terminal of any width: one line per fact, wrapping only between words
    (a phone over SSH gets the same facts as the HTML page)."""
    wd = rep.watchdog
    out = [
        "probes: " + (", ".join(f"{k} {v}" for k, v in wd.verdicts.items()) or "none")
        + "; decisions: " + (", ".join(f"{k} {v}" for k, v in wd.decisions.items()) or "none"),
    ]  # fmt: skip
    for r in rep.watchdog.restarts:
        result = "still restarting" if r.ok is None else ("ok" if r.ok else f"failed: {r.error}")
        back = (
            ""
            if r.back_after_s is None
            else f", answering again after {r.back_after_s / 60:.1f} min"
        )
        false = f" FALSE RESTART CANDIDATE: {r.why_candidate}." if r.false_candidate else ""
        dossier = f" Dossier {r.incident_id or '-'}: {r.suspect}." if r.suspect else ""
        out.append(
            f"restart {local(r.ts, tz, '%H:%M:%S')} by {r.by}, cause {r.cause}: {result}{back}."
            f"{false} {r.reason}{dossier}"
        )
    for a in wd.alerts:
        out.append(f"alert {local(a['ts'], tz, '%H:%M:%S')} {a['category']}: {a['message']}")
    for n in rep.thermal.nodes:
        hz = n.hottest_zone
        hottest = DASH if hz is None else f"{hz.role or hz.zone} {_c(hz.peak_c)}"
        margin = _c(n.min_margin_c)
        throttle = (
            f"{n.throttle.episodes} episode(s), {n.throttle.duration_s:g} s"
            if n.throttle.episodes
            else "none"
        )
        gpu = (
            _c(n.gpu_peak_c)
            if n.gpu_peak_c is not None
            else f"- ({n.null_reasons.get('gpu_peak_c')})"
        )
        out.append(
            f"{n.node} ({n.role}): GPU peak {gpu}, hottest {hottest}, margin to critical "
            f"{margin}, throttle {throttle}, samples {n.samples_received}/{n.samples_expected}"
        )
        roles = ", ".join(
            f"{label} {_c(v.get('peak_c'))}" for label, v in sorted(n.role_peaks.items())
        )
        if roles:
            out.append(f"  {n.node} zones: {roles}")
    out += [f"gap {g}" for g in gap_lines(rep, tz)]
    for b in rep.bench:
        for row in b.rows:
            out.append(
                f"bench {local(b.started_at, tz, '%H:%M')} {b.run_id} k={_n(b.drafter_k, '{}')} "
                f"c={_n(row.get('level'), '{}')}: {_n(row.get('aggregate_tok_s'))} tok/s aggregate, "
                f"{_n(row.get('per_stream_tok_s'))} per stream, TTFT p50 "
                f"{_n(row.get('ttft_p50_ms'), '{:,.0f}')} ms, ITL p50 {_n(row.get('itl_p50_ms'), '{:,.0f}')} ms, "
                f"acceptance {_n(row.get('acceptance_pct'), '{:.0f}%')}, "
                f"{_n(row.get('tokens_per_step'), '{:.2f}')} tokens/step"
            )
    for at, run, suite, thinking, restarts, task, path, items, score, err, prev, delta in eval_rows(
        rep, tz
    ):
        out.append(
            f"eval {at} {run}{'' if suite == DASH else f' (suite {suite})'}: {task} ({path}) "
            f"n={items} score {score} +/- {err} (previous {prev}, {delta} points); thinking "
            f"{thinking}, {restarts} server restart(s) resumed"
        )
    out += [f"tune {at} {run}: {line}" for at, run, line in tune_rows(rep, tz)]
    out += canary_lines(rep.canaries, lambda ts: local(ts, tz, "%H:%M"))
    return out
