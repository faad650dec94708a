"""Controlled evidence found in the ledger itself: when a new configuration differs from the one
before it in one subject only (the KV cache alone, the clock cap alone), and its first canary
can be set against the last canary of the configuration before, with no state change that
matters between them, that pair measured the subject's effect alone. Each level's Welch ratio
is written as an `evidence` row (source "pair"); `why` ranks such subjects first. Issue 54's
experiments write rows of their own (source "experiment") the same way (`add_evidence`).
"""

from __future__ import annotations

import math

from tpwarden.cluster.ledger import stats
from tpwarden.cluster.ledger.differences import representative, state_matters
from tpwarden.cluster.ledger.store import Ledger
from tpwarden.cluster.ledger.subjects import subject_of
from tpwarden.cluster.ledger.tables import Evidence


def pair_evidence(led: Ledger, canary_id: int, now: float) -> list[Evidence]:
    """Evidence rows written for `canary_id` against the configuration before (see above);
    [] when the change was not alone, nothing comparable ran before, or it is known already."""
    c = led.canary(canary_id)
    if c is None or c.status != "ok" or c.record_id is None:
        return []
    changes = led.changes(c.record_id)
    subjects = {subject_of(ch.key).name for ch in changes}
    if len(subjects) != 1:
        return []
    prev = led.records(c.cluster, limit=1, before_id=c.record_id)
    if not prev:
        return []
    earlier = [
        x for x in led.canaries(c.cluster, definition=c.definition, status="ok", before_id=c.id)
        if x.cfg == prev[0].cfg
    ]  # fmt: skip
    if not earlier:
        return []
    base = earlier[-1]
    if led.has_evidence(base.id, c.id):
        return []
    if any(state_matters(x) for x in led.state_diff(base.id, c.id)):
        return []  # something else moved too (a co-tenant, the clocks): not alone
    (subject,) = subjects
    rep = representative(changes)
    out = []
    for level in sorted(set(base.levels) & set(c.levels)):
        before = stats.logs([r.output_tok_s for r in led.repeats(base.id, level) if not r.warmup])
        after = stats.logs([r.output_tok_s for r in led.repeats(c.id, level) if not r.warmup])
        w = stats.welch(before, after)
        if w is None:
            continue
        ev = Evidence(
            id=None, ts=now, cluster=c.cluster, source="pair", subject=subject,
            before=rep.before, after=rep.after, definition=c.definition, level=level,
            ratio=math.exp(w.diff), lo=math.exp(w.lo), hi=math.exp(w.hi),
            canary_a=base.id, canary_b=c.id,
            note=f"records {prev[0].id} -> {c.record_id}: {len(changes)} rows of {subject}",
        )  # fmt: skip
        led.add_evidence(ev)
        out.append(ev)
    return out
