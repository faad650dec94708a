"""The one `--since/--until` parser (issue 31, item 3): a time without a zone is read in the
operator's zone (`--tz`, UTC when not given); a zone or offset written wins; epoch is absolute."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest
from tpwarden.cluster.reports.thermal.localtime import parse_moment, parse_tz, parse_window

KST = ZoneInfo("Asia/Seoul")
NOW = datetime(2026, 12, 3, 9, 15, tzinfo=KST).timestamp()


def test_a_zoneless_iso_time_is_read_in_the_operators_zone() -> None:
    got = parse_moment("2026-12-02T22:00", KST, NOW)
    assert got == datetime(2026, 12, 2, 13, 0, tzinfo=UTC).timestamp()
    assert parse_moment("2026-12-02T22:00", parse_tz(None), NOW) == (
        datetime(2026, 12, 2, 22, 0, tzinfo=UTC).timestamp()  # no --tz: UTC
    )


def test_a_written_zone_or_offset_wins_over_the_operators_zone() -> None:
    utc = datetime(2026, 12, 2, 22, 0, tzinfo=UTC).timestamp()
    assert parse_moment("2026-12-02T22:00Z", KST, NOW) == utc
    assert parse_moment("2026-12-03T07:00+09:00", KST, NOW) == utc
    assert parse_moment(str(utc), KST, NOW) == utc  # epoch seconds


def test_a_clock_time_is_the_latest_such_time_in_the_zone() -> None:
    assert parse_moment("09:00", KST, NOW) == datetime(2026, 12, 3, 9, 0, tzinfo=KST).timestamp()
    assert parse_moment("10:00", KST, NOW) == datetime(2026, 12, 2, 10, 0, tzinfo=KST).timestamp()
    since, until = parse_window("22:00", "07:30", KST, NOW)
    assert (since, until) == (
        datetime(2026, 12, 2, 22, 0, tzinfo=KST).timestamp(),
        datetime(2026, 12, 3, 7, 30, tzinfo=KST).timestamp(),
    )


@pytest.mark.parametrize("text", ["garbage", "25:00", "2026-13-01T00:00"])
def test_what_is_not_a_time_is_a_value_error(text: str) -> None:
    with pytest.raises(ValueError):
        parse_moment(text, KST, NOW)


def test_since_after_until_is_refused() -> None:
    with pytest.raises(ValueError, match="after"):
        parse_window("2026-12-03T08:00", "2026-12-03T07:00", KST, NOW)
    assert parse_window(None, None, KST, NOW) == (None, None)
