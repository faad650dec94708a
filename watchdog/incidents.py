"""The watchdog's incident dossiers on disk: one JSON file each, size-capped, oldest pruned
(issue 32).

``<state_dir>/incidents/<id>.json``, written atomically and privately (tpwarden.cluster.durable).
A dossier over ``MAX_BYTES`` loses its stacks' frames below the top ones (the collective frame
each process waits in is kept), then its GPU facts, and says so in ``trimmed``. At most
``MAX_FILES`` dossiers are kept; the oldest go first. Reading never raises for one bad file.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path

from tpwarden.cluster.durable import JSONObject, atomic_write_json, json_bytes, read_json

INCIDENTS_DIR = "incidents"
MAX_BYTES = 512 * 1024
MAX_FILES = 50
KEEP_FRAMES = 12


def incidents_dir(state_dir: str | os.PathLike[str]) -> Path:
    return Path(state_dir) / INCIDENTS_DIR


def new_id(taken_at_unix_s: float, existing: set[str]) -> str:
    """``20261204T082600Z``, with ``-2``, ``-3``... when taken in the same second."""
    base = datetime.fromtimestamp(taken_at_unix_s, UTC).strftime("%Y%m%dT%H%M%SZ")
    ident, n = base, 1
    while ident in existing:
        n += 1
        ident = f"{base}-{n}"
    return ident


def _processes(doc: JSONObject) -> list[JSONObject]:
    out = []
    for node in (doc.get("nodes") or {}).values():
        collected = node.get("collected") or {}
        out += [p for p in collected.get("processes") or [] if isinstance(p, dict)]
    return out


def trimmed(doc: JSONObject, max_bytes: int = MAX_BYTES) -> JSONObject:
    """``doc`` within ``max_bytes`` of JSON: stacks cut to their top frames, then GPU facts
    dropped, then every stack dropped. ``trimmed`` lists what went."""
    out: JSONObject = json.loads(json_bytes(doc))
    steps: list[str] = []
    if len(json_bytes(out)) > max_bytes:
        for p in _processes(out):
            for t in (p.get("pyspy") or {}).get("threads") or []:
                t["frames"] = t.get("frames", [])[:KEEP_FRAMES]
        steps.append(f"stacks cut to {KEEP_FRAMES} frames")
    if len(json_bytes(out)) > max_bytes:
        for node in (out.get("nodes") or {}).values():
            node.pop("gpus", None)
        steps.append("GPU facts")
    if len(json_bytes(out)) > max_bytes:
        for p in _processes(out):
            if p.get("pyspy"):
                p["pyspy"] = {"waiting_in": p["pyspy"].get("waiting_in"), "threads": []}
        steps.append("stacks (their collective frame kept)")
    if steps:
        out["trimmed"] = steps
    return out


class IncidentStore:
    """The dossiers of one watchdog state dir. Constructing it touches nothing."""

    def __init__(self, state_dir: str | os.PathLike[str], max_files: int = MAX_FILES) -> None:
        self.dir = incidents_dir(state_dir)
        self.max_files = max_files

    def ids(self) -> list[str]:
        """Stored ids, oldest first (ids sort by time)."""
        try:
            names = os.listdir(self.dir)
        except FileNotFoundError:
            return []
        return sorted(n[: -len(".json")] for n in names if n.endswith(".json"))

    def save(self, doc: JSONObject) -> str:
        """Store ``doc`` (trimmed to the cap) under a new id, prune the oldest; the id."""
        ident = new_id(float(doc.get("taken_at_unix_s") or 0.0), set(self.ids()))
        out = trimmed(doc) | {"id": ident}
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        atomic_write_json(self.dir / f"{ident}.json", out)
        for old in self.ids()[: -self.max_files]:
            (self.dir / f"{old}.json").unlink(missing_ok=True)
        return ident

    def load(self, ident: str) -> JSONObject | None:
        """The dossier ``ident``; None when there is none (or it cannot be read)."""
        if not ident or "/" in ident or ident.startswith("."):
            return None
        try:
            doc = read_json(self.dir / f"{ident}.json")
        except (OSError, ValueError):
            return None
        return doc if isinstance(doc, dict) else None

    def summaries(self) -> list[JSONObject]:
        """One line per stored dossier, newest first: id, time, reason, suspect, summary."""
        out = []
        for ident in reversed(self.ids()):
            doc = self.load(ident)
            if doc is None:
                out.append({"id": ident, "error": "unreadable"})
                continue
            out.append(summary_of(doc) | {"id": ident})
        return out

    def last(self) -> JSONObject | None:
        """The newest dossier's summary, or None."""
        for ident in reversed(self.ids()):
            doc = self.load(ident)
            if doc is not None:
                return summary_of(doc) | {"id": ident}
        return None


def summary_of(doc: JSONObject) -> JSONObject:
    v = doc.get("verdict") or {}
    return {
        "id": doc.get("id"),
        "taken_at_unix_s": doc.get("taken_at_unix_s"),
        "reason": doc.get("reason"),
        "restart_id": doc.get("restart_id"),
        "suspect": v.get("suspect"),
        "summary": v.get("summary"),
        "took_s": doc.get("took_s"),
    }
