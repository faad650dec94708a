"""The ledger's SQLite schema, its version and the migrations that reach it (pure constants).

`PRAGMA user_version` holds the schema version; `PRAGMA application_id` marks the file as a
tpwarden ledger, so an unrelated SQLite file is refused rather than written into. A version is
reached from the one before by `MIGRATIONS[version]` (a list of statements run in one
transaction); a new ledger runs them all from 1. A file with a version above `SCHEMA_VERSION` was
written by a newer tpwarden and is refused, never changed.

Fingerprints and state samples are key/value rows per node (`node` '*' for the cluster and the
engine), so the difference between two records is one query joining the rows on (node, key).
Values are text (numbers and JSON lists as written by `fingerprint.value_text`); NULL is a value
that could not be read, its reason in the record's `missing` JSON.
"""

from __future__ import annotations

APPLICATION_ID = 0x74707764  # "tpwd"
SCHEMA_VERSION = 1

_V1 = [
    """CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID""",
    # One row each time the server became healthy: what ran, fingerprinted from the nodes.
    """CREATE TABLE records (
        id INTEGER PRIMARY KEY,
        ts REAL NOT NULL,
        cluster TEXT NOT NULL,
        cfg TEXT NOT NULL,
        spec_hash TEXT,
        action TEXT NOT NULL,
        reason TEXT NOT NULL,
        who TEXT,
        run_dir TEXT,
        rows INTEGER NOT NULL,
        missing TEXT NOT NULL DEFAULT '{}'
    )""",
    "CREATE INDEX records_by_time ON records (cluster, ts)",
    """CREATE TABLE fingerprint (
        record_id INTEGER NOT NULL REFERENCES records (id) ON DELETE CASCADE,
        node TEXT NOT NULL,
        key TEXT NOT NULL,
        value TEXT,
        PRIMARY KEY (record_id, node, key)
    ) WITHOUT ROWID""",
    # What changed against the cluster's previous record, computed once when a record is added.
    """CREATE TABLE changes (
        record_id INTEGER NOT NULL REFERENCES records (id) ON DELETE CASCADE,
        node TEXT NOT NULL,
        key TEXT NOT NULL,
        before TEXT,
        after TEXT,
        PRIMARY KEY (record_id, node, key)
    ) WITHOUT ROWID""",
    # One canary run (both levels); deferred and failed ones are kept with their reason.
    """CREATE TABLE canaries (
        id INTEGER PRIMARY KEY,
        record_id INTEGER REFERENCES records (id),
        cluster TEXT NOT NULL,
        cfg TEXT,
        definition TEXT NOT NULL,
        started REAL NOT NULL,
        finished REAL,
        status TEXT NOT NULL,
        reason TEXT,
        trigger TEXT NOT NULL,
        server_s REAL,
        run_dir TEXT,
        doc TEXT NOT NULL DEFAULT '{}'
    )""",
    "CREATE INDEX canaries_by_definition ON canaries (cluster, definition, started)",
    """CREATE TABLE canary_levels (
        canary_id INTEGER NOT NULL REFERENCES canaries (id) ON DELETE CASCADE,
        level INTEGER NOT NULL,
        output_tok_s REAL,
        per_stream_tok_s REAL,
        ttft_p50_ms REAL,
        itl_p50_ms REAL,
        acceptance_pct REAL,
        tokens_per_step REAL,
        preemptions REAL,
        kv_usage_max REAL,
        repeats INTEGER NOT NULL,
        PRIMARY KEY (canary_id, level)
    ) WITHOUT ROWID""",
    """CREATE TABLE canary_repeats (
        canary_id INTEGER NOT NULL REFERENCES canaries (id) ON DELETE CASCADE,
        level INTEGER NOT NULL,
        repeat INTEGER NOT NULL,
        warmup INTEGER NOT NULL,
        output_tok_s REAL,
        per_stream_tok_s REAL,
        ttft_p50_ms REAL,
        itl_p50_ms REAL,
        duration_s REAL,
        completed INTEGER,
        PRIMARY KEY (canary_id, level, repeat)
    ) WITHOUT ROWID""",
    # The state taken with a canary: co-tenants, GPU users, clocks and their reasons, temps.
    """CREATE TABLE state_samples (
        canary_id INTEGER NOT NULL REFERENCES canaries (id) ON DELETE CASCADE,
        node TEXT NOT NULL,
        key TEXT NOT NULL,
        value TEXT,
        PRIMARY KEY (canary_id, node, key)
    ) WITHOUT ROWID""",
    # Controlled evidence: a subject that changed alone between two canaries of one definition
    # ('pair', found by the ledger) or by an experiment's variant ('experiment', issue 54).
    """CREATE TABLE evidence (
        id INTEGER PRIMARY KEY,
        ts REAL NOT NULL,
        cluster TEXT NOT NULL,
        source TEXT NOT NULL,
        subject TEXT NOT NULL,
        before TEXT,
        after TEXT,
        definition TEXT NOT NULL,
        level INTEGER NOT NULL,
        ratio REAL NOT NULL,
        lo REAL,
        hi REAL,
        canary_a INTEGER,
        canary_b INTEGER,
        note TEXT
    )""",
    "CREATE INDEX evidence_by_subject ON evidence (cluster, subject)",
]

# version -> the statements that reach it from the version before
MIGRATIONS: dict[int, list[str]] = {1: _V1}
