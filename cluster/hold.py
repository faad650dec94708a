"""The operator's hold: `hold.json` in the watchdog's state directory, the one way an operator, a
rollout or `tpwarden down` tells the watchdog to leave the server alone for a while.

Operators write it (`write_hold` / `write_release`, or `hold_document` through their own writer);
the watchdog reads it every tick (`load_hold`) and trusts nothing in it: a malformed file counts as
no hold, and any hold ends at most `MAX_HOLD_S` after it was set. In the core, not in the
watchdog, because the CLI and a rollout write it too.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from enum import StrEnum

from tpwarden.cluster.documents import STRICT, Time, load_document
from tpwarden.cluster.durable import JSONObject, JSONValue, atomic_write_json, move_aside, read_json

MAX_HOLD_S = 7 * 24 * 3600.0  # an operator hold is time-limited: never longer than a week


class HoldKind(StrEnum):
    """What a hold says: a pause of the watchdog's restarts, or an intentional stop."""

    HOLD = "hold"  # `watchdog hold`, a restart's or a rollout's lease
    DOWN = "down"  # `tpwarden down`: no restart until `tpwarden up`


def hold_path(state_dir: str) -> str:
    """Where a watchdog with this state directory reads its operator hold."""
    return os.path.join(state_dir, "hold.json")


@dataclass(frozen=True)
class OperatorHold:
    until: float
    reason: str
    by: str = ""
    kind: str = HoldKind.HOLD  # a HoldKind


def hold_document(
    *, until: float, reason: str, by: str, now: float, kind: str = "hold"
) -> JSONObject:
    """hold.json holding restarts until `until` (`kind` "down": an intentional stop)."""
    hold = {"until": until, "reason": reason, "by": by, "set_at": now, "kind": kind}
    return {"hold": hold, "released_at": None}


def release_document(*, by: str, now: float) -> JSONObject:
    """hold.json after a release: restarts re-armed at `now`."""
    return {"hold": None, "released_at": now, "released_by": by}


def write_hold(
    path: str, *, until: float, reason: str, by: str, now: float, kind: str = "hold"
) -> None:
    doc = hold_document(until=until, reason=reason, by=by, now=now, kind=kind)
    atomic_write_json(path, doc)


def write_release(path: str, *, by: str, now: float) -> None:
    atomic_write_json(path, release_document(by=by, now=now))


@dataclasses.dataclass(frozen=True)
class HoldRead:
    hold: OperatorHold | None
    released_at: float | None
    invalid: str | None = None  # why the file was not used (it was moved aside)
    moved_to: str | None = None


@dataclass(frozen=True)
class _HoldEntry:
    """hold.json's `hold` as `hold_document` writes it (its schema: `_parse_hold`)."""

    __pydantic_config__ = STRICT

    until: Time
    reason: str = ""
    by: str = ""
    set_at: Time | None = None
    kind: str | None = None  # a HoldKind; absent: "hold"


@dataclass(frozen=True)
class _HoldFile:
    __pydantic_config__ = STRICT

    hold: _HoldEntry | None = None
    released_at: Time | None = None
    released_by: str | None = None


def _parse_hold(data: JSONValue, path: str) -> tuple[OperatorHold | None, float | None]:
    if isinstance(data, dict) and not data.get("hold"):
        data = {**data, "hold": None}  # an empty hold is no hold
    doc = load_document(_HoldFile, data)
    h = doc.hold
    hold = None
    if h is not None:
        # Capped on read: a hold lasts at most MAX_HOLD_S from when it was set (or written).
        base = h.set_at if h.set_at is not None else os.path.getmtime(path)
        until = min(h.until, base + MAX_HOLD_S)
        hold = OperatorHold(until, h.reason, h.by, h.kind or HoldKind.HOLD)
    return hold, doc.released_at


def load_hold(path: str, *, quarantine: bool = False) -> HoldRead:
    """hold.json as data, not trust: an `until` of Infinity/NaN or of the wrong type makes the
    file invalid (reported in `invalid`; no hold; moved aside when `quarantine`, which only the
    daemon asks for); any hold is capped at MAX_HOLD_S after it was set."""
    try:
        data = read_json(path)
        if data is None:
            return HoldRead(None, None)
        hold, released = _parse_hold(data, path)
        return HoldRead(hold, released)
    except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError) as exc:
        error = f"{type(exc).__name__}: {exc}"
        return HoldRead(None, None, error, move_aside(path, error) if quarantine else None)
    except OSError as exc:  # unreadable now (permissions, I/O): no hold this tick, file kept
        return HoldRead(None, None, f"{type(exc).__name__}: {exc}")


def read_hold(path: str) -> tuple[OperatorHold | None, float | None]:
    """(active-or-expired hold, last release time); an invalid file counts as no hold."""
    got = load_hold(path)
    return got.hold, got.released_at
