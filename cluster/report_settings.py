"""`tpwarden.report`: the daily delivery of the morning report (issue 31 item 6). The watchdog
posts last night's report to its alert hooks at `deliver_at` in the zone `tz`; off unless
`deliver_at` is set. Validated once with the other settings (cluster/settings.py)."""

from __future__ import annotations

import re
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, field_validator

_CLOCK = re.compile(r"^([01]\d|2[0-3]):([0-5]\d)$")


class _Model(BaseModel):
    # as cluster/settings.py's models: unknown keys and wrong types are errors at load time
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


def clock_time(value: str) -> tuple[int, int]:
    """ "07:30" -> (7, 30); ValueError for anything but a 24-hour HH:MM."""
    m = _CLOCK.match(value)
    if m is None:
        raise ValueError(f"{value!r} is not a time of day as HH:MM (00:00 to 23:59, e.g. 07:30)")
    return int(m.group(1)), int(m.group(2))


def zone(name: str) -> ZoneInfo:
    """An IANA zone ("Asia/Seoul", "UTC"); ValueError when the tz database has no such zone."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(
            f"unknown time zone {name!r} (use an IANA name, e.g. Asia/Seoul)"
        ) from None


def zone_name(name: str) -> str:
    """The settings' time-zone check: ``name`` itself when it is an IANA zone (`zone`)."""
    zone(name)
    return name


class ReportSpec(_Model):
    deliver_at: str | None = Field(
        None,
        description="Local time (HH:MM, in `tz`) at which the watchdog posts last night's "
        "morning report to its alert hooks (retried like an alert); null: not delivered.",
    )
    tz: str = Field("UTC", description="IANA time zone of deliver_at, e.g. Asia/Seoul.")
    window_h: float = Field(
        12, ge=1, le=168, description="The delivered report covers this many hours before it."
    )

    @field_validator("deliver_at")
    @classmethod
    def _clock(cls, value: str | None) -> str | None:
        if value is not None:
            clock_time(value)
        return value

    @field_validator("tz")
    @classmethod
    def _zone(cls, value: str) -> str:
        return zone_name(value)
