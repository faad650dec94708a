"""The ledger's rows as frozen types: what `store.Ledger` takes and returns. Pure."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import ClassVar

from tpwarden.cluster.durable import JSONObject


@dataclass(frozen=True, order=True)
class KeyValue:
    """One fingerprint or state-sample row: `node` ('*' for the cluster and engine), key, value
    (None: not readable, the reason in the record's `missing`)."""

    node: str
    key: str
    value: str | None


@dataclass(frozen=True)
class Change:
    node: str
    key: str
    before: str | None
    after: str | None


@dataclass(frozen=True, kw_only=True)
class NewRecord:
    ts: float
    cluster: str
    cfg: str  # "cfg:" + 12 hex of the configuration rows (fingerprint.config_id)
    spec_hash: str | None
    action: str
    reason: str
    who: str | None
    run_dir: str | None
    rows: tuple[KeyValue, ...]
    missing: JSONObject = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class LedgerRecord:
    id: int
    ts: float
    cluster: str
    cfg: str
    spec_hash: str | None
    action: str
    reason: str
    who: str | None
    run_dir: str | None
    rows: int
    missing: JSONObject
    changed: int  # rows that differ from the cluster's previous record

    @classmethod
    def from_row(cls, row: tuple[object, ...]) -> LedgerRecord:
        names = [f.name for f in fields(cls)]
        doc = dict(zip(names, row, strict=True))
        doc["missing"] = json.loads(str(doc["missing"] or "{}"))
        return cls(**doc)  # type: ignore[arg-type]  # the columns are the fields, in order

    def to_json(self) -> JSONObject:
        return asdict(self)


@dataclass(frozen=True, kw_only=True)
class LevelRow:
    """One concurrency level of a canary: the medians of its measured repeats."""

    level: int
    output_tok_s: float | None
    per_stream_tok_s: float | None
    ttft_p50_ms: float | None
    itl_p50_ms: float | None
    acceptance_pct: float | None
    tokens_per_step: float | None
    preemptions: float | None
    kv_usage_max: float | None
    repeats: int

    def values(self) -> tuple[object, ...]:
        return tuple(getattr(self, f.name) for f in fields(self))

    @classmethod
    def from_row(cls, row: tuple[object, ...]) -> LevelRow:
        return cls(**dict(zip([f.name for f in fields(cls)], row, strict=True)))  # type: ignore[arg-type]


@dataclass(frozen=True, kw_only=True)
class RepeatRow:
    """One `vllm bench serve` run of a canary (warm-ups are kept too, marked)."""

    level: int
    repeat: int
    warmup: bool
    output_tok_s: float | None
    per_stream_tok_s: float | None
    ttft_p50_ms: float | None
    itl_p50_ms: float | None
    duration_s: float | None
    completed: int | None

    def values(self) -> tuple[object, ...]:
        return tuple(getattr(self, f.name) for f in fields(self))

    @classmethod
    def from_row(cls, row: tuple[object, ...]) -> RepeatRow:
        doc = dict(zip([f.name for f in fields(cls)], row, strict=True))
        doc["warmup"] = bool(doc["warmup"])
        return cls(**doc)  # type: ignore[arg-type]


@dataclass(frozen=True, kw_only=True)
class CanaryHead:
    """A canary's own columns (table `canaries`, less its id): as written, and as read."""

    record_id: int | None
    cluster: str
    cfg: str | None
    definition: str
    started: float
    finished: float | None
    status: str  # CanaryStatus value
    reason: str | None
    trigger: str
    server_s: float | None
    run_dir: str | None
    doc: JSONObject


@dataclass(frozen=True, kw_only=True)
class NewCanary(CanaryHead):
    levels: tuple[LevelRow, ...] = ()
    repeats: tuple[RepeatRow, ...] = ()
    state: tuple[KeyValue, ...] = ()


@dataclass(frozen=True, kw_only=True)
class CanaryRow(CanaryHead):
    id: int
    levels: dict[int, LevelRow]

    @classmethod
    def from_row(cls, row: tuple[object, ...], levels: dict[int, LevelRow]) -> CanaryRow:
        """`row`: the id, then the head's columns in their order (store._CANARY_COLUMNS)."""
        names = ["id", *(f.name for f in fields(CanaryHead))]
        doc = dict(zip(names, row, strict=True))
        doc["doc"] = json.loads(str(doc["doc"] or "{}"))
        return cls(**doc, levels=levels)  # type: ignore[arg-type]

    def throughput(self, level: int) -> float | None:
        lv = self.levels.get(level)
        return lv.output_tok_s if lv is not None else None

    def to_json(self) -> JSONObject:
        doc: JSONObject = {"id": self.id, **asdict(self)}  # the id first, as in the table
        doc["levels"] = [asdict(v) for _, v in sorted(self.levels.items())]
        return doc


@dataclass(frozen=True)
class SeriesPoint:
    """One completed canary at one level, as `why` compares them."""

    id: int
    started: float
    cfg: str | None
    record_id: int | None
    tok_s: float
    repeats: int


@dataclass(frozen=True, kw_only=True)
class Evidence:
    """Controlled evidence: `subject` changed alone from `before` to `after` and the canary of
    `definition` at `level` moved by `ratio` (after / before) within [lo, hi] (95 %)."""

    COLUMNS: ClassVar[str] = (
        "id, ts, cluster, source, subject, before, after, definition, level, ratio, lo, hi,"
        " canary_a, canary_b, note"
    )

    id: int | None
    ts: float
    cluster: str
    source: str  # "pair" (found in the ledger) | "experiment" (issue 54)
    subject: str
    before: str | None
    after: str | None
    definition: str
    level: int
    ratio: float
    lo: float | None
    hi: float | None
    canary_a: int | None
    canary_b: int | None
    note: str | None

    def values(self) -> tuple[object, ...]:
        return tuple(getattr(self, f.name) for f in fields(self) if f.name != "id")

    @classmethod
    def from_row(cls, row: tuple[object, ...]) -> Evidence:
        return cls(**dict(zip([f.name for f in fields(cls)], row, strict=True)))  # type: ignore[arg-type]

    def to_json(self) -> JSONObject:
        return asdict(self)
