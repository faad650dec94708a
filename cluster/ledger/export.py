"""`ledger export --jsonl`: the ledger as JSON lines for a notebook or Apache Otava (pure but
for the store it reads).

Default: one line per canary level (a time series: `time` in ISO 8601 UTC, the metrics, and the
attributes a change-point tool splits by: cluster, definition, level, cfg), deferred and failed
canaries included with their reason and no metrics. `--all`: every row of every table, each
line `{"table": ..., <its columns>}`, enough to rebuild the ledger elsewhere.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

from tpwarden.cluster.durable import JSONObject
from tpwarden.cluster.ledger.store import TABLES, Ledger

METRICS = (
    "output_tok_s", "per_stream_tok_s", "ttft_p50_ms", "itl_p50_ms", "acceptance_pct",
    "tokens_per_step", "preemptions", "kv_usage_max",
)  # fmt: skip


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")


def series_lines(led: Ledger, cluster: str | None = None) -> Iterator[JSONObject]:
    """One object per canary level (or per deferred/failed canary), oldest first."""
    for c in led.canaries(cluster):
        base: JSONObject = {
            "time": iso(c.started), "cluster": c.cluster, "definition": c.definition,
            "cfg": c.cfg, "canary_id": c.id, "record_id": c.record_id, "status": c.status,
            "trigger": c.trigger,
        }  # fmt: skip
        if not c.levels:
            yield {**base, "level": None, "reason": c.reason}
            continue
        for level, row in sorted(c.levels.items()):
            yield {**base, "level": level, "repeats": row.repeats,
                   **{m: getattr(row, m) for m in METRICS}}  # fmt: skip


def all_lines(led: Ledger) -> Iterator[JSONObject]:
    for table in TABLES:
        for row in led.dump(table):
            yield {"table": table, **row}
