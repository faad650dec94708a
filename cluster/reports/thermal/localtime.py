"""Times in the operator's zone: parse ``--tz`` and ``--since 22:00``, format for people.

Operators think in their own zone (the field report uses KST); the files stay in UTC epoch
seconds and every rendering goes through here. Pure apart from reading the tz database.

`parse_window` is the one parser of every `--since/--until` (`tpwarden report`, `tpwarden thermal
report`): a time given without a zone (`22:00`, `2026-12-02T22:00`) is read in the operator's
zone, `--tz` (UTC when not given); one with a zone or offset (`...Z`, `...+09:00`) keeps it, and
epoch seconds are absolute.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

_CLOCK = re.compile(r"^(\d{1,2}):(\d{2})$")

# The options' help, one wording for every command that takes a window
SINCE_HELP = "Start: HH:MM (the latest before --until), ISO 8601 or epoch; no zone: read in --tz."
UNTIL_HELP = "End: HH:MM (the latest past), ISO 8601 or epoch; no zone: read in --tz."
TZ_HELP = (
    "The operator's zone, e.g. Asia/Seoul (default UTC): --since/--until without a zone are "
    "read in it, and times are shown in it."
)


def parse_tz(name: str | None) -> tzinfo:
    """An IANA zone name (Asia/Seoul), "UTC", or None for UTC. ValueError when unknown."""
    if name is None or name.upper() in ("UTC", "Z"):
        return UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError(f"unknown time zone {name!r} (use an IANA name, e.g. Asia/Seoul)") from exc


def tz_name(tz: tzinfo, at: float | None = None) -> str:
    """Short name at a moment ("KST", "UTC")."""
    dt = datetime.fromtimestamp(at if at is not None else 0, tz=tz)
    return dt.tzname() or str(tz)


def parse_moment(text: str, tz: tzinfo, now: float, not_after: float | None = None) -> float:
    """ "22:00" -> the latest such wall-clock time in ``tz`` at or before ``not_after`` (default
    now); ISO 8601 without offset is read in ``tz`` (with one, as written); epoch seconds pass
    through. ValueError for anything else."""
    m = _CLOCK.match(text.strip())
    if m:
        ref = datetime.fromtimestamp(not_after if not_after is not None else now, tz=tz)
        cand = ref.replace(hour=int(m.group(1)), minute=int(m.group(2)), second=0, microsecond=0)
        if cand > ref:
            cand -= timedelta(days=1)
        return cand.timestamp()
    try:
        return float(text)
    except ValueError:
        pass
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise ValueError(f"{text!r}: not HH:MM, ISO 8601 or epoch seconds") from exc
    return (dt if dt.tzinfo else dt.replace(tzinfo=tz)).timestamp()


def parse_window(
    since: str | None, until: str | None, tz: tzinfo, now: float
) -> tuple[float | None, float | None]:
    """``--since 22:00 --until 07:30``: until is the latest 07:30 not in the future, since the
    latest 22:00 before that (so the night is one window, whatever the date)."""
    t_until = parse_moment(until, tz, now) if until else None
    t_since = parse_moment(since, tz, now, not_after=t_until) if since else None
    if t_since is not None and t_until is not None and t_since > t_until:
        raise ValueError("--since is after --until")
    return t_since, t_until


def local(ts: float, tz: tzinfo, fmt: str = "%Y-%m-%d %H:%M:%S") -> str:
    return datetime.fromtimestamp(ts, tz=tz).strftime(fmt)


def local_iso(ts: float, tz: tzinfo) -> str:
    return datetime.fromtimestamp(ts, tz=tz).isoformat(timespec="seconds")


def span_text(since: float, until: float, tz: tzinfo) -> str:
    """ "Wed 2 Dec 22:00 - Thu 3 Dec 07:30 KST" (date once when both ends share it)."""
    a, b = datetime.fromtimestamp(since, tz=tz), datetime.fromtimestamp(until, tz=tz)
    left = a.strftime("%a %-d %b %H:%M")
    right = b.strftime("%H:%M") if a.date() == b.date() else b.strftime("%a %-d %b %H:%M")
    return f"{left} - {right} {tz_name(tz, until)}"
