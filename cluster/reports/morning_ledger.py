"""The morning report's canaries (issue 53): each canary of the window against its own
configuration's history (the median of the earlier completed canaries of the same kind and
configuration), with `ledger why` when it was slower than the best earlier one. Reads the
ledger (read-only); `load_canaries` returns nothing when there is no ledger."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from tpwarden.cluster.durable import JSONObject
from tpwarden.cluster.ledger.store import Ledger, LedgerError
from tpwarden.cluster.ledger.why import Verdict, why

MAX_CANARIES = 20  # the window's latest ones; the ledger keeps them all


@dataclass(frozen=True, kw_only=True)
class CanarySummary:
    id: int
    started: float
    status: str
    reason: str | None
    cfg: str | None
    trigger: str
    levels: tuple[JSONObject, ...]  # per level: level, tok/s, history median, ratio to it
    verdict: str | None  # `why` at concurrency 1 (slower / within noise / ...)
    why_ratio: float | None
    why_ci: tuple[float | None, float | None] | None
    causes: tuple[str, ...]  # why's differences, most likely first
    unrecorded: bool

    def to_json(self) -> JSONObject:
        return asdict(self)


def load_canaries(path: Path | None, since: float, until: float) -> list[CanarySummary]:
    if path is None or not path.is_file():
        return []
    try:
        led = Ledger.open(path, readonly=True)
    except LedgerError:
        return []
    with led:
        return summarize_canaries(led, since, until)


def summarize_canaries(led: Ledger, since: float, until: float) -> list[CanarySummary]:
    rows = [c for c in led.canaries() if since <= c.started <= until][-MAX_CANARIES:]
    out = []
    for c in rows:
        levels = []
        for level, lv in sorted(c.levels.items()):
            history = [
                p.tok_s for p in led.series(c.cluster, c.definition, level)
                if p.cfg == c.cfg and p.id < c.id
            ]  # fmt: skip
            median = statistics.median(history) if history else None
            ratio = lv.output_tok_s / median if median and lv.output_tok_s else None
            levels.append({"level": level, "tok_s": lv.output_tok_s, "history_median": median,
                           "history_n": len(history), "ratio": ratio})  # fmt: skip
        rep = why(led, c.cluster, definition=c.definition, before_id=c.id + 1) if c.levels else None
        slower = rep is not None and rep.verdict is Verdict.SLOWER
        out.append(CanarySummary(
            id=c.id, started=c.started, status=c.status, reason=c.reason, cfg=c.cfg,
            trigger=c.trigger, levels=tuple(levels),
            verdict=rep.verdict.value if rep else None,
            why_ratio=rep.ratio if rep else None,
            why_ci=(rep.lo, rep.hi) if rep and rep.ratio is not None else None,
            causes=tuple(d.subject for d in rep.differences) if slower and rep else (),
            unrecorded=bool(rep and rep.unrecorded_cause),
        ))  # fmt: skip
    return out


def canary_lines(canaries: Sequence[CanarySummary], at: Callable[[float], str]) -> list[str]:
    """Text lines (`at(ts)` formats a time) for the terminal and the HTML page."""
    out = []
    for c in canaries:
        head = f"canary {at(c.started)} #{c.id} ({c.trigger}, {c.cfg or '-'})"
        if c.status != "ok":
            out.append(f"{head}: {c.status}: {c.reason}")
            continue
        parts = []
        for lv in c.levels:
            vs = (
                f", x{lv['ratio']:.2f} of its configuration's {lv['history_n']}"
                if lv["ratio"]
                else ""
            )
            parts.append(f"c={lv['level']} {lv['tok_s']:.1f} tok/s{vs}")
        line = f"{head}: " + "; ".join(parts)
        if c.verdict == Verdict.SLOWER.value:
            lo, hi = c.why_ci or (None, None)
            ci = f" [{lo:.2f}, {hi:.2f}]" if lo is not None and hi is not None else ""
            cause = ", ".join(c.causes) if c.causes else "unrecorded cause"
            line += f". SLOWER than the best earlier: x{c.why_ratio:.2f}{ci}; why: {cause}"
        out.append(line)
    return out
