"""How a night looks on the terminal: `experiment status` and the end of `experiment run`."""

from __future__ import annotations

from datetime import datetime, tzinfo

from tpwarden.cluster.durable import JSONObject, JSONValue
from tpwarden.cluster.experiment.night import tok_s
from tpwarden.cluster.experiment.queue import NightOutcome
from tpwarden.cluster.operations.experiment_run import NightStatus
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
    out = [head, f"lock: {'held by ' + got.lock_holder if got.lock_holder else 'free'}"]
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
