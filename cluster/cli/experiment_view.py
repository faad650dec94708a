"""How a night looks on the terminal: `experiment status`, `show`, `abort`, the end of
`experiment run` and of its guard."""

from __future__ import annotations

from datetime import datetime, tzinfo

from tpwarden.cluster.durable import JSONObject, JSONValue
from tpwarden.cluster.experiment.guard_loop import GuardOutcome
from tpwarden.cluster.experiment.night import tok_s
from tpwarden.cluster.experiment.queue import NightOutcome
from tpwarden.cluster.operations.experiment_abort import AbortOutcome
from tpwarden.cluster.operations.experiment_run import NightStatus
from tpwarden.cluster.operations.experiment_show import NightShow
from tpwarden.cluster.report_settings import zone


def status_lines(got: NightStatus) -> list[str]:
    """Each variant with its figures against production's opening canary, production's two
    canaries and their drift, the deadline, the lock."""
    tz = zone(got.tz)
    run = got.run
    if run is None:
        head = f"plan {got.plan}: no night yet (results in {got.results})"
    else:
        end = f"finished {_at(run.finished, tz)}" if run.finished else "unfinished"
        head = (f"plan {got.plan}: night started {_at(run.started, tz)}, deadline "
                f"{_at(run.deadline, tz)} ({got.tz}), {end}")  # fmt: skip
    if run is not None and run.aborted_at is not None:
        head += f"; aborted {_at(run.aborted_at, tz)} by {run.aborted_by}"
    out = [head, f"lock: {'held by ' + got.lock_holder if got.lock_holder else 'free'}",
           guard_line(got.guard, tz)]  # fmt: skip
    start, end_doc = got.production.get("production-start"), got.production.get("production-end")
    base = tok_s((start or {}).get("canary"))
    out.append(_production("production-start", start))
    for row in got.variants:
        out.append(_variant(row, base))
    out.append(_production("production-end", end_doc))
    return out


def _production(name: str, doc: JSONObject | None) -> str:
    if doc is None:
        return f"  {name:<20} left"
    if doc.get("error") is not None:
        return f"  {name:<20} failed   {doc['error']}"
    drift = doc.get("drift")
    extra = ""
    if isinstance(drift, dict) and drift:
        extra = "  drift " + ", ".join(f"c{lv} x{r:.3f}" for lv, r in drift.items())
    return f"  {name:<20} done     {_figures(doc.get('canary'), {})}{extra}"


def _variant(row: JSONObject, base: dict[int, float]) -> str:
    name, status = str(row["name"]), str(row["status"])
    line = f"  {name:<20} {status:<8}"
    if status == "done":
        line += f" {_figures(row.get('canary'), base)}"
        summary = row.get("summary")
        if isinstance(summary, list) and summary:
            line += f"  ({'; '.join(str(s) for s in summary)})"
    elif status == "failed":
        line += f" {row.get('stage', '')}: {row.get('error', '')}"
    elif status == "skipped":
        line += f" {row.get('reason', '')}"
    return line.rstrip()


def _figures(canary: JSONValue, base: dict[int, float]) -> str:
    """ "c1 12.3 tok/s (x1.065)": against production's opening canary when there is one."""
    parts = []
    for lv, v in sorted(tok_s(canary).items()):
        ratio = f" (x{v / base[lv]:.3f})" if base.get(lv) else ""
        parts.append(f"c{lv} {v:.1f} tok/s{ratio}")
    return ", ".join(parts) or "no figures"


def night_lines(out: NightOutcome, got: NightStatus) -> list[str]:
    """The end of `experiment run`: what the night did, then its status."""
    if out.nothing_left:
        return [f"nothing is left of this night: every variant has a result or a failure file "
                f"({got.results})"]  # fmt: skip
    restored = out.restored
    how = "-" if restored is None else (
        ("restored" if restored.restarted else "verified") + f": {restored.detail}"
        if restored.ok else f"NOT restored: {restored.detail}")  # fmt: skip
    lines = [
        f"night: {len(out.done)} done, {len(out.failed)} failed, {len(out.skipped)} skipped; "
        f"production {how}",
    ]
    if out.stopped:
        lines.append(f"stopped: {out.stopped} (then: tpwarden experiment run --resume)")
    return lines + status_lines(got)


def _at(ts: float | None, tz: tzinfo) -> str:
    if ts is None:
        return "-"
    return datetime.fromtimestamp(ts, tz).strftime("%a %d %b %H:%M")


def guard_line(doc: JSONObject | None, tz: tzinfo) -> str:
    """ "guard: armed (pid 4242), fires Tue 05:48" / what it did / not running."""
    if doc is None:
        return "guard: none armed"
    state, pid = str(doc.get("state") or "unknown"), doc.get("pid")
    fire_at, updated = _num(doc.get("fire_at")), _num(doc.get("updated"))
    if doc.get("alive"):
        if state == "waiting":
            return f"guard: waiting (pid {pid}): {doc.get('detail', '')}"
        return f"guard: armed (pid {pid}), fires {_at(fire_at, tz)} ({doc.get('restore_from', '')})"
    if state in ("restored", "verified", "failed"):
        what = {"restored": "restored production", "verified": "verified production in place",
                "failed": "FAILED to restore production"}[state]  # fmt: skip
        return f"guard: fired {_at(updated, tz)}: {what}: {doc.get('detail', '')}"
    return f"guard: not running (last: {state} {_at(updated, tz)}: {doc.get('detail', '')})"


def guard_end_line(out: GuardOutcome) -> str:
    return f"guard {out.state.value}: {out.detail}"


def abort_lines(out: AbortOutcome) -> list[str]:
    if not out.aborted:
        return [out.detail]
    stopped = (f"night process {out.night_pid} stopped by {out.signal}" if out.night_pid
               else "no night process was running")  # fmt: skip
    restored = out.restored
    how = ("production restored" if restored and restored.restarted
           else "production verified in place" if restored and restored.ok
           else "production NOT restored" if restored else "production not restored")  # fmt: skip
    return [f"aborted: {stopped}; {how}: {out.detail}"]


def show_lines(got: NightShow) -> list[str]:
    """`experiment show`: the night's head, each variant whole, then its events."""
    tz = zone(got.status.tz)
    out = status_lines(got.status)[:3]
    out.append(_production("production-start", got.status.production.get("production-start")))
    for row in got.variants:
        out += _variant_whole(row, tz)
    if got.variant is None:
        out.append(_production("production-end", got.status.production.get("production-end")))
        out += _compared(got.production_end)
    out.append(f"events ({len(got.events)}{', ' + got.variant if got.variant else ''}):")
    out += [f"  {_event(e, tz)}" for e in got.events]
    return out


def _variant_whole(row: JSONObject, tz: tzinfo) -> list[str]:
    name, status = str(row["name"]), str(row["status"])
    lines = [f"{name}: {status}"]
    summary = row.get("summary")
    if isinstance(summary, list) and summary:
        lines.append(f"  changes: {'; '.join(str(s) for s in summary)}")
    if row.get("config_hash") or row.get("rollout_id"):
        lines.append(f"  config {row.get('config_hash') or '-'}; rollout "
                     f"{row.get('rollout_id') or '-'} ({row.get('rollout_step') or 'done'})")  # fmt: skip
    started, finished = _num(row.get("started")), _num(row.get("finished"))
    if started is not None and finished is not None:
        lines.append(f"  {_at(started, tz)} -> {_at(finished, tz)} "
                     f"({(finished - started) / 60:.1f} min)")  # fmt: skip
    if status == "failed":
        lines.append(f"  failed at {row.get('stage', '?')}: {row.get('error', '')}")
    elif status == "skipped":
        lines.append(f"  skipped: {row.get('reason', '')}")
    compared = row.get("compared")
    return lines + _compared(compared if isinstance(compared, list) else [])


_SHOWN = (("output_tok_s", "tok/s", "{:.1f}"), ("per_stream_tok_s", "stream", "{:.1f}"),
          ("ttft_p50_ms", "TTFT ms", "{:.0f}"), ("itl_p50_ms", "ITL ms", "{:.1f}"),
          ("acceptance_pct", "accept %", "{:.1f}"))  # fmt: skip


def _compared(rows: list[JSONValue]) -> list[str]:
    """A figure per line, a column per level: the variant / production's opening canary and
    their ratio (narrow: three levels fit 80 columns)."""
    levels = [r for r in rows if isinstance(r, dict) and isinstance(r.get("figures"), dict)]
    if not levels:
        return []
    out = [f"  {'':<9}" + "".join(f"{'c' + str(r.get('level')):<23}" for r in levels).rstrip()]
    for key, label, fmt in _SHOWN:
        cells = []
        for r in levels:
            figures = r.get("figures")
            cells.append(_cell(figures.get(key) if isinstance(figures, dict) else None, fmt))
        out.append(f"  {label:<9}" + "".join(f"{c:<23}" for c in cells).rstrip())
    out.append("  (each: the variant / production's opening canary, and their ratio)")
    return out


def _cell(fig: JSONValue, fmt: str) -> str:
    if not isinstance(fig, dict) or _num(fig.get("value")) is None:
        return "-"
    value, prod, ratio = _num(fig.get("value")), _num(fig.get("production")), _num(fig.get("ratio"))
    text = fmt.format(value)
    if prod is not None:
        text += f" / {fmt.format(prod)}"
    if ratio is not None:
        text += f" x{ratio:.3f}"
    return text


def _event(e: JSONObject, tz: tzinfo) -> str:
    ts = _num(e.get("ts"))
    when = datetime.fromtimestamp(ts, tz).strftime("%H:%M:%S") if ts is not None else "--:--:--"
    rest = " ".join(f"{k}={v}" for k, v in e.items() if k not in ("ts", "kind") and v is not None)
    return f"{when} {e.get('kind')} {rest}".rstrip()


def _num(value: JSONValue) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
