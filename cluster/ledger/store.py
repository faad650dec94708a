"""THE ledger store: one SQLite file (standard library `sqlite3`) per cluster and state directory.

Durable by construction: WAL journal with `synchronous=FULL`, every record or canary written in
one `BEGIN IMMEDIATE` transaction, so a process killed with -9 leaves the last committed record
whole and nothing half-written (SQLite rolls an unfinished transaction back on the next open);
a second process reads while one writes (WAL readers never block the writer, nor it them).

Refusals, never repairs: a file written by a newer schema, a file that is not SQLite, another
program's SQLite file and a damaged one are refused with the path and what to do, and left
exactly as they are (`LedgerRefused`, exit 2). Older schemas are migrated forward
(`schema.MIGRATIONS`) in one transaction.

Reading and writing the rows lives in `tables` (the typed rows) and here (the SQL).
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path

from tpwarden.cluster.durable import JSONObject, default_state_dir
from tpwarden.cluster.errors import TpwardenError
from tpwarden.cluster.ledger.schema import APPLICATION_ID, MIGRATIONS
from tpwarden.cluster.ledger.tables import (
    CanaryRow,
    Change,
    Evidence,
    KeyValue,
    LedgerRecord,
    LevelRow,
    NewCanary,
    NewRecord,
    RepeatRow,
    SeriesPoint,
)

SQLITE_MAGIC = b"SQLite format 3\x00"
BUSY_TIMEOUT_S = 30.0


class LedgerError(TpwardenError):
    """The ledger could not be read or written."""


class LedgerRefused(LedgerError):
    """The file is not a ledger this tpwarden may write: newer, foreign or damaged. Untouched."""

    exit_code = 2


def ledger_path(cluster: str, state_dir: str | os.PathLike[str] | None = None) -> Path:
    """Where a cluster's ledger lives: `<state dir>/ledger/<cluster>.sqlite`."""
    base = Path(state_dir) if state_dir is not None else default_state_dir()
    return base / "ledger" / f"{cluster}.sqlite"


def _refuse_damaged(path: Path, detail: str) -> LedgerRefused:
    return LedgerRefused(
        f"{path}: damaged ledger ({detail}); it was left as it is. Keep it for the record "
        f"(mv {path} {path}.damaged) and a new ledger starts with the next record"
    )


class Ledger:
    """One open ledger. `Ledger.open(path)` creates or migrates it; `readonly=True` never
    creates or changes anything. Thread-safe (one connection, one lock)."""

    def __init__(self, path: Path, conn: sqlite3.Connection) -> None:
        self.path = path
        self._conn = conn
        self._lock = threading.RLock()

    # -- opening ----------------------------------------------------------------------------
    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        readonly: bool = False,
        migrations: Mapping[int, Sequence[str]] = MIGRATIONS,
    ) -> Ledger:
        p = Path(path)
        exists = p.exists() and p.stat().st_size > 0
        if readonly and not exists:
            raise LedgerError(
                f"no ledger at {p} yet: it starts with the first record "
                "(`tpwarden up`, `restart`, a rollout or a watchdog restart reaching a healthy server)"
            )
        if exists:
            _check_header(p)
        elif not readonly:
            p.parent.mkdir(parents=True, exist_ok=True)
        target = max(migrations)
        try:
            if readonly:
                conn = sqlite3.connect(
                    f"{p.resolve().as_uri()}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_S,
                    isolation_level=None, check_same_thread=False,
                )  # fmt: skip
            else:
                conn = sqlite3.connect(
                    p, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
                )
            conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
            conn.execute("PRAGMA foreign_keys = ON")
            version, app = _versions(conn)
        except sqlite3.DatabaseError as exc:
            raise _refuse_damaged(p, str(exc)) from None
        if version > target:
            conn.close()
            raise LedgerRefused(
                f"{p}: written by a newer tpwarden (ledger schema {version}; this one reads up "
                f"to {target}): upgrade tpwarden to read it; the file was left as it is"
            )
        if version and app != APPLICATION_ID:
            conn.close()
            raise LedgerRefused(
                f"{p}: an SQLite file, but not a tpwarden ledger (application_id {app:#x}); "
                "point the ledger elsewhere (tpwarden.ledger.path); the file was left as it is"
            )
        ledger = cls(p, conn)
        try:
            if not readonly and version == 0 and _has_tables(conn):
                conn.close()
                raise LedgerRefused(
                    f"{p}: an SQLite file with tables but no ledger schema; point the ledger "
                    "elsewhere (tpwarden.ledger.path); the file was left as it is"
                )
            if not readonly:
                conn.execute("PRAGMA journal_mode = WAL")
                conn.execute("PRAGMA synchronous = FULL")
                ledger._migrate(version, target, migrations)
            elif version < target:
                conn.close()
                raise LedgerError(
                    f"{p}: ledger schema {version} is older than this tpwarden's ({target}); "
                    "a command that records (or `ledger list` once with write access) migrates it"
                )
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise _refuse_damaged(p, str(exc)) from None
        return ledger

    def _migrate(self, version: int, target: int, migrations: Mapping[int, Sequence[str]]) -> None:
        if version == target:
            return
        with self._tx() as c:
            found, _ = _versions(c)  # another process may have migrated meanwhile
            for v in range(found + 1, target + 1):
                for statement in migrations[v]:
                    c.execute(statement)
            c.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            c.execute(f"PRAGMA user_version = {target}")
            c.execute(
                "INSERT OR REPLACE INTO meta (key, value) VALUES ('schema_version', ?)",
                (str(target),),
            )

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        """One write transaction: all of it or none of it, also under kill -9."""
        with self._lock:
            c = self._conn
            try:
                c.execute("BEGIN IMMEDIATE")
                yield c
                c.execute("COMMIT")
            except BaseException:
                if c.in_transaction:
                    c.execute("ROLLBACK")
                raise

    @contextlib.contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            try:
                yield self._conn
            except sqlite3.DatabaseError as exc:
                if isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc):
                    raise LedgerError(f"{self.path}: {exc}") from None
                raise _refuse_damaged(self.path, str(exc)) from None

    @property
    def schema_version(self) -> int:
        with self._read() as c:
            return _versions(c)[0]

    def check(self) -> str:
        """SQLite's own `quick_check`: "ok", or what is damaged."""
        with self._read() as c:
            rows = c.execute("PRAGMA quick_check").fetchall()
        return "; ".join(str(r[0]) for r in rows)

    # -- records ----------------------------------------------------------------------------
    def add_record(self, new: NewRecord) -> LedgerRecord:
        """Write a record and its fingerprint rows; its changes against the cluster's previous
        record are computed in the same transaction (one query)."""
        with self._tx() as c:
            cur = c.execute(
                "INSERT INTO records (ts, cluster, cfg, spec_hash, action, reason, who, run_dir,"
                " rows, missing) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (new.ts, new.cluster, new.cfg, new.spec_hash, new.action, new.reason, new.who,
                 new.run_dir, len(new.rows), json.dumps(new.missing, sort_keys=True)),
            )  # fmt: skip
            rid = int(cur.lastrowid or 0)
            c.executemany(
                "INSERT INTO fingerprint (record_id, node, key, value) VALUES (?, ?, ?, ?)",
                [(rid, r.node, r.key, r.value) for r in new.rows],
            )
            prev = c.execute(
                "SELECT id FROM records WHERE cluster = ? AND id < ? ORDER BY id DESC LIMIT 1",
                (new.cluster, rid),
            ).fetchone()
            if prev is not None:
                c.executemany(
                    "INSERT INTO changes (record_id, node, key, before, after) VALUES (?,?,?,?,?)",
                    [(rid, d.node, d.key, d.before, d.after) for d in _diff(c, prev[0], rid)],
                )
        rec = self.record(rid)
        assert rec is not None
        return rec

    def record(self, record_id: int) -> LedgerRecord | None:
        with self._read() as c:
            row = c.execute(f"{_RECORD_SELECT} WHERE r.id = ?", (record_id,)).fetchone()
        return LedgerRecord.from_row(row) if row else None

    def records(
        self, cluster: str | None = None, limit: int | None = None, before_id: int | None = None
    ) -> list[LedgerRecord]:
        """Newest first."""
        where, args = _where(cluster=cluster, before_id=before_id)
        sql = f"{_RECORD_SELECT}{where} ORDER BY r.id DESC"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        with self._read() as c:
            return [LedgerRecord.from_row(r) for r in c.execute(sql, args)]

    def latest_record(self, cluster: str) -> LedgerRecord | None:
        got = self.records(cluster, limit=1)
        return got[0] if got else None

    def fingerprint(self, record_id: int) -> list[KeyValue]:
        with self._read() as c:
            rows = c.execute(
                "SELECT node, key, value FROM fingerprint WHERE record_id = ? ORDER BY node, key",
                (record_id,),
            ).fetchall()
        return [KeyValue(*r) for r in rows]

    def diff(self, a: int, b: int) -> list[Change]:
        """Rows that differ between records `a` and `b` (absent on one side: None)."""
        with self._read() as c:
            return _diff(c, a, b)

    def changes(self, record_id: int) -> list[Change]:
        """What changed against the cluster's previous record (stored when it was written)."""
        with self._read() as c:
            rows = c.execute(
                "SELECT node, key, before, after FROM changes WHERE record_id = ? "
                "ORDER BY key, node",
                (record_id,),
            ).fetchall()
        return [Change(*r) for r in rows]

    # -- canaries ---------------------------------------------------------------------------
    def add_canary(self, new: NewCanary) -> int:
        """One canary with its levels, every repeat and its state sample, in one transaction."""
        with self._tx() as c:
            cur = c.execute(
                "INSERT INTO canaries (record_id, cluster, cfg, definition, started, finished,"
                " status, reason, trigger, server_s, run_dir, doc)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (new.record_id, new.cluster, new.cfg, new.definition, new.started, new.finished,
                 new.status, new.reason, new.trigger, new.server_s, new.run_dir,
                 json.dumps(new.doc, sort_keys=True, default=str)),
            )  # fmt: skip
            cid = int(cur.lastrowid or 0)
            for table, rows in (("canary_levels", new.levels), ("canary_repeats", new.repeats)):
                values = [(cid, *row.values()) for row in rows]
                if values:
                    marks = ", ".join("?" * len(values[0]))
                    c.executemany(f"INSERT INTO {table} VALUES ({marks})", values)
            c.executemany(
                "INSERT INTO state_samples (canary_id, node, key, value) VALUES (?, ?, ?, ?)",
                [(cid, s.node, s.key, s.value) for s in new.state],
            )
        return cid

    def canaries(
        self,
        cluster: str | None = None,
        definition: str | None = None,
        status: str | None = None,
        limit: int | None = None,
        before_id: int | None = None,
    ) -> list[CanaryRow]:
        """Canaries with their levels, oldest first (the last `limit` ones)."""
        where, args = _where(
            cluster=cluster, definition=definition, status=status, before_id=before_id, table="c"
        )
        sql = f"SELECT {_CANARY_COLUMNS} FROM canaries c{where} ORDER BY c.id DESC"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        with self._read() as c:
            heads = c.execute(sql, args).fetchall()
            if not heads:
                return []
            lo = min(h[0] for h in heads)
            levels: dict[int, dict[int, LevelRow]] = {}
            for row in c.execute("SELECT * FROM canary_levels WHERE canary_id >= ?", (lo,)):
                levels.setdefault(row[0], {})[row[1]] = LevelRow.from_row(row[1:])
        return [CanaryRow.from_row(h, levels.get(h[0], {})) for h in reversed(heads)]

    def series(self, cluster: str, definition: str, level: int) -> list[SeriesPoint]:
        """Every completed canary of one definition at one level, oldest first: one query (the
        index on (cluster, definition, started)); `why` reads 10,000 of them in milliseconds."""
        with self._read() as c:
            rows = c.execute(
                "SELECT c.id, c.started, c.cfg, c.record_id, l.output_tok_s, l.repeats"
                " FROM canaries c JOIN canary_levels l ON l.canary_id = c.id AND l.level = ?"
                " WHERE c.cluster = ? AND c.definition = ? AND c.status = 'ok'"
                " AND l.output_tok_s IS NOT NULL ORDER BY c.started, c.id",
                (level, cluster, definition),
            ).fetchall()
        return [SeriesPoint(*r) for r in rows]

    def canary(self, canary_id: int) -> CanaryRow | None:
        got = self.canaries(before_id=canary_id + 1, limit=1)
        return got[0] if got and got[0].id == canary_id else None

    def repeats(self, canary_id: int, level: int | None = None) -> list[RepeatRow]:
        sql = "SELECT * FROM canary_repeats WHERE canary_id = ?"
        args: list[object] = [canary_id]
        if level is not None:
            sql, args = sql + " AND level = ?", [*args, level]
        with self._read() as c:
            rows = c.execute(sql + " ORDER BY level, repeat", args).fetchall()
        return [RepeatRow.from_row(r[1:]) for r in rows]

    def state(self, canary_id: int) -> list[KeyValue]:
        with self._read() as c:
            rows = c.execute(
                "SELECT node, key, value FROM state_samples WHERE canary_id = ? ORDER BY node, key",
                (canary_id,),
            ).fetchall()
        return [KeyValue(*r) for r in rows]

    def state_diff(self, a: int, b: int) -> list[Change]:
        with self._read() as c:
            return _diff(c, a, b, table="state_samples", column="canary_id")

    # -- evidence ---------------------------------------------------------------------------
    def add_evidence(self, ev: Evidence) -> int:
        with self._tx() as c:
            cur = c.execute(
                "INSERT INTO evidence (ts, cluster, source, subject, before, after, definition,"
                " level, ratio, lo, hi, canary_a, canary_b, note)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                ev.values(),
            )
            return int(cur.lastrowid or 0)

    def evidence(self, cluster: str, subjects: Iterable[str] | None = None) -> list[Evidence]:
        sql = f"SELECT {Evidence.COLUMNS} FROM evidence WHERE cluster = ?"
        args: list[object] = [cluster]
        wanted = list(subjects) if subjects is not None else None
        if wanted is not None:
            sql += f" AND subject IN ({', '.join('?' * len(wanted))})"
            args += wanted
        with self._read() as c:
            return [Evidence.from_row(r) for r in c.execute(sql + " ORDER BY id", args)]

    def has_evidence(self, canary_a: int, canary_b: int) -> bool:
        with self._read() as c:
            return (
                c.execute(
                    "SELECT 1 FROM evidence WHERE canary_a = ? AND canary_b = ?",
                    (canary_a, canary_b),
                ).fetchone()
                is not None
            )

    # -- export -----------------------------------------------------------------------------
    def dump(self, table: str) -> Iterator[JSONObject]:
        """Every row of one table as a JSON object (for `ledger export`)."""
        if table not in TABLES:
            raise ValueError(f"unknown ledger table {table!r}")
        with self._read() as c:
            cur = c.execute(f"SELECT * FROM {table}")  # noqa: S608 - a name from TABLES
            names = [d[0] for d in cur.description]
            rows = cur.fetchall()
        for row in rows:
            yield dict(zip(names, row, strict=True))


TABLES = (
    "records", "fingerprint", "changes", "canaries", "canary_levels", "canary_repeats",
    "state_samples", "evidence",
)  # fmt: skip
_RECORD_SELECT = (
    "SELECT r.id, r.ts, r.cluster, r.cfg, r.spec_hash, r.action, r.reason, r.who, r.run_dir,"
    " r.rows, r.missing, (SELECT COUNT(*) FROM changes ch WHERE ch.record_id = r.id)"
    " FROM records r"
)
_CANARY_COLUMNS = (
    "c.id, c.record_id, c.cluster, c.cfg, c.definition, c.started, c.finished, c.status,"
    " c.reason, c.trigger, c.server_s, c.run_dir, c.doc"
)


def _where(table: str = "r", **conds: object) -> tuple[str, list[object]]:
    parts, args = [], []
    for name, value in conds.items():
        if value is None:
            continue
        if name == "before_id":
            parts.append(f"{table}.id < ?")
        else:
            parts.append(f"{table}.{name} = ?")
        args.append(value)
    return (" WHERE " + " AND ".join(parts) if parts else ""), args


def _diff(
    c: sqlite3.Connection, a: int, b: int, table: str = "fingerprint", column: str = "record_id"
) -> list[Change]:
    """One query: rows of `a` and `b` joined on (node, key) both ways, those that differ."""
    sql = f"""
        SELECT x.node, x.key, x.value, y.value FROM {table} x
          LEFT JOIN {table} y ON y.{column} = :b AND y.node = x.node AND y.key = x.key
          WHERE x.{column} = :a AND (y.key IS NULL OR x.value IS NOT y.value)
        UNION ALL
        SELECT y.node, y.key, NULL, y.value FROM {table} y
          WHERE y.{column} = :b AND NOT EXISTS (
            SELECT 1 FROM {table} x WHERE x.{column} = :a AND x.node = y.node AND x.key = y.key)
        ORDER BY 2, 1
    """  # noqa: S608 - table and column are this module's constants
    return [Change(*r) for r in c.execute(sql, {"a": a, "b": b})]


def _versions(c: sqlite3.Connection) -> tuple[int, int]:
    version = int(c.execute("PRAGMA user_version").fetchone()[0])
    app = int(c.execute("PRAGMA application_id").fetchone()[0])
    return version, app


def _has_tables(c: sqlite3.Connection) -> bool:
    return (
        c.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' LIMIT 1").fetchone() is not None
    )


def _check_header(path: Path) -> None:
    try:
        with path.open("rb") as f:
            head = f.read(len(SQLITE_MAGIC))
    except OSError as exc:
        raise LedgerError(f"{path}: cannot read the ledger: {exc}") from None
    if head != SQLITE_MAGIC:
        raise _refuse_damaged(path, "not an SQLite database: its header is wrong")
