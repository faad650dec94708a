"""The ledger's screens as plain lines (pure): `why` on one 80-column screen, the list of
records, a record, a diff. Values are shown in their units (GiB for byte sizes, MHz, %)."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from datetime import datetime, tzinfo

from tpwarden.cluster.experiment.from_why import RevertPlan
from tpwarden.cluster.ledger.differences import Difference, group
from tpwarden.cluster.ledger.tables import CanaryRow, Change, LedgerRecord
from tpwarden.cluster.ledger.why import Verdict, WhyReport

WIDTH = 80


def when(ts: float | None, tz: tzinfo) -> str:
    return "-" if ts is None else datetime.fromtimestamp(ts, tz).strftime("%Y-%m-%d %H:%M")


def human(key: str, value: str | None) -> str:
    """A row's value in its unit: byte sizes in GiB, clocks in MHz, long text cut."""
    if value is None:
        return "(none)"
    try:
        number = float(value)
    except ValueError:
        return value if len(value) <= 40 else value[:37] + "..."
    if ("bytes" in key or "kv_cache.memory" in key) and number >= 2**30:
        return f"{number / 2**30:g} GiB"
    if key.endswith("_mhz"):
        return f"{number:g} MHz"
    if key.endswith("_w"):
        return f"{number:g} W"
    return f"{number:g}"


def _nodes(d: Difference, all_nodes: int) -> str:
    if not d.nodes:
        return ""
    if all_nodes and len(d.nodes) == all_nodes and all_nodes > 1:
        return f"all {all_nodes} nodes"
    return ", ".join(d.nodes)


def _revert(d: Difference) -> str | None:
    if not d.revert:
        return d.advice
    parts = []
    for r in d.revert:
        if "set" in r:
            parts.append(
                f"rollout --set {r['set']}={human(r['set'], r.get('value'))}".replace(" GiB", "GiB")
            )
        else:
            parts.append(str(r.get("command")))
    return "revert: " + "; ".join(parts)


def difference_lines(d: Difference, n: int, all_nodes: int, tag: str | None = None) -> list[str]:
    key = d.key or (d.keys[0] if d.keys else d.subject)
    change = f"{human(key, d.before)} -> {human(key, d.after)}"
    if d.source == "state" and d.subject.startswith("co-tenant"):
        change = ""
    where = _nodes(d, all_nodes)
    head = f"{n:>2} {d.subject}  {change}".rstrip()
    if where:
        head += f"  ({where})"
    tag = d.tier if tag is None else tag
    head = head[: WIDTH - len(tag) - 2]
    lines = [f"{head:<{WIDTH - len(tag) - 1}} {tag}"]
    notes = ([d.evidence] if d.evidence else []) + d.measured
    revert = _revert(d)
    if revert:
        notes.append(revert)
    for note in notes:
        lines += textwrap.wrap(note, WIDTH, initial_indent="     ", subsequent_indent="       ")
    return lines


def why_lines(rep: WhyReport, tz: tzinfo, nodes: int = 0) -> list[str]:
    """`tpwarden ledger why` in lines of at most 80 characters."""
    out = [
        f"ledger why  {rep.cluster} · {rep.definition or '-'} at concurrency {rep.level}"[:WIDTH]
    ]
    if rep.verdict in (Verdict.NO_CANARY, Verdict.NO_EARLIER):
        out.append(rep.verdict.value + ": " + "; ".join(rep.notes))
        if rep.latest is not None:
            out.append(f"latest  #{rep.latest.id} {when(rep.latest.started, tz)}  "
                       f"{rep.latest.cfg}  {rep.latest.tok_s:.1f} tok/s")  # fmt: skip
        return [line[:WIDTH] for line in out]
    assert rep.latest is not None and rep.best is not None
    for name, p in (("latest", rep.latest), ("best", rep.best)):
        out.append(f"{name:<7} #{p.id:<5} {when(p.started, tz)}  {p.cfg or '-':<17}"
                   f"{p.tok_s:7.1f} tok/s ({p.repeats} repeats)")  # fmt: skip
    ci = (
        f"95% [{rep.lo:.2f}, {rep.hi:.2f}]"
        if rep.lo is not None and rep.hi is not None
        else "no interval"
    )
    pv = "" if rep.p is None else ("p<0.001" if rep.p < 0.001 else f"p={rep.p:.3f}")
    out.append(
        f"ratio   {rep.ratio:.2f}  {ci}  {pv}".ljust(WIDTH - 16)
        + f"{rep.verdict.value.upper():>16}"
    )
    nz = rep.noise
    if nz is not None:
        spread = f"sd {nz.sd_pct:.1f}%" if nz.sd_pct is not None else "spread unknown"
        out.append(f"noise   {spread} over {nz.n} canaries of {nz.cfg}; outside below "
                   f"-{nz.band_pct:.1f}%"[:WIDTH])  # fmt: skip
    lv = rep.levels
    if lv:
        parts = []
        for k, label, fmt in (("ttft_p50_ms", "TTFT", "{:.0f}ms"), ("itl_p50_ms", "ITL", "{:.0f}ms"),
                              ("acceptance_pct", "accept", "{:.0f}%")):  # fmt: skip
            b, a = lv.get(k, {}).get("best"), lv.get(k, {}).get("latest")
            if b is not None and a is not None:
                parts.append(f"{label} {fmt.format(b)}->{fmt.format(a)}")
        if parts:
            out.append(("canary  " + "  ".join(parts))[:WIDTH])
    out.append("")
    if rep.unrecorded_cause:
        out += textwrap.wrap(_unrecorded(rep, tz), WIDTH)
    elif rep.differences:
        out.append("differences, most likely first" if rep.verdict is Verdict.SLOWER
                   else "differences (the throughput did not move beyond noise)")  # fmt: skip
        for i, d in enumerate(rep.differences, 1):
            out += difference_lines(d, i, nodes)
    else:
        out.append("no difference that matters between the two canaries")
    return [line[:WIDTH] for line in out]


def _unrecorded(rep: WhyReport, tz: tzinfo) -> str:
    d = rep.drift or {}
    text = "unrecorded cause: nothing recorded differs between the two canaries"
    if d.get("began") is not None:
        return (f"{text}; in the latest configuration's series the drift began between "
                f"{when(d.get('after'), tz)} (#{d.get('last_fast')}) and "
                f"{when(d.get('began'), tz)} (#{d.get('first_slow')})")  # fmt: skip
    return f"{text}; {d.get('note', 'the drift could not be dated')}"


def record_lines(
    recs: Sequence[LedgerRecord], latest: dict[int, CanaryRow], tz: tzinfo
) -> list[str]:
    out = [f"{'id':>5}  {'healthy at':<16}  {'action':<16} {'cfg':<16} {'changed':>7}  c1 tok/s"]
    for r in recs:
        c = latest.get(r.id)
        tok = c.throughput(1) if c is not None else None
        shown = f"{tok:.1f}" if tok is not None else (c.status if c is not None else "-")
        out.append(f"{r.id:>5}  {when(r.ts, tz):<16}  {r.action[:16]:<16} {r.cfg:<16} "
                   f"{r.changed:>7}  {shown}")  # fmt: skip
    return out


def diff_lines(changes: Sequence[Change], nodes: int) -> list[str]:
    if not changes:
        return ["no difference"]
    out = []
    for i, d in enumerate(group(changes, "fingerprint"), 1):
        out += difference_lines(d, i, nodes, d.category)
        out += [f"       {k}" for k in d.keys[:6]]
    return out


def plan_lines(plan: RevertPlan, path: str) -> list[str]:
    """`why --plan`: what the written plan runs, and what it cannot revert."""
    if not plan.variants:
        out = [f"plan -> {path}: nothing here is revertable by tpwarden"]
    else:
        names = ", ".join(str(v["name"]) for v in plan.variants)
        out = [f"plan -> {path}: {len(plan.variants)} variant(s): {names}"]
    for c in plan.not_revertable:
        nodes = f" on {', '.join(c['nodes'])}" if c["nodes"] else ""
        out.append(f"  not revertable: {c['subject']}{nodes}: {c['advice']}")
    if plan.variants:
        out.append(f"  check it: tpwarden experiment run {path} -i INVENTORY --dry-run")
    return out
