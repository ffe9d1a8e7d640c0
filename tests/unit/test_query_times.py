"""The one time parser of the reads: epoch millis or ISO-8601, UTC when no zone is given, errors
that name the parameter. Expected values are computed independently with calendar.timegm."""

import calendar

import pytest

from deltastate.query.errors import ParameterError
from deltastate.query.times import MAX_MS, iso_ms, parse_time


def utc_ms(y: int, mo: int, d: int, h: int = 0, mi: int = 0, s: int = 0, ms: int = 0) -> int:
    return calendar.timegm((y, mo, d, h, mi, s, 0, 0, 0)) * 1000 + ms


@pytest.mark.parametrize(("text", "expected"), [
    ("0", 0),
    ("1700000000123", 1_700_000_000_123),
    ("-5", -5),
    (" 42 ", 42),
    ("2026-01-02T03:04:05Z", utc_ms(2026, 1, 2, 3, 4, 5)),
    ("2026-01-02T03:04:05", utc_ms(2026, 1, 2, 3, 4, 5)),  # no zone: UTC, not the host's zone
    ("2026-01-02", utc_ms(2026, 1, 2)),
    ("2026-01-02T03:04:05.678Z", utc_ms(2026, 1, 2, 3, 4, 5, 678)),
    ("2026-01-02T03:04:05.678999+00:00", utc_ms(2026, 1, 2, 3, 4, 5, 678)),  # floored to millis
    ("2026-01-02T05:04:05+02:00", utc_ms(2026, 1, 2, 3, 4, 5)),
    ("2026-01-01T23:30:00-01:00", utc_ms(2026, 1, 2, 0, 30)),
    ("1969-12-31T23:59:59.999Z", -1),
])
def test_parses_millis_and_iso(text: str, expected: int) -> None:
    assert parse_time(text, "from") == expected


def test_ints_and_none() -> None:
    assert parse_time(None, "to") is None
    assert parse_time(123, "to") == 123


@pytest.mark.parametrize("bad", ["", "yesterday", "2026-13-01", "12:00", "1e3", "1.5", True, str(MAX_MS + 1)])
def test_refusals_name_the_parameter(bad) -> None:
    with pytest.raises(ParameterError, match="^parameter 'latest_start': ") as caught:
        parse_time(bad, "latest_start")
    assert caught.value.parameter == "latest_start"


def test_iso_round_trip() -> None:
    for ms in (0, 1_700_000_000_123, utc_ms(2030, 6, 30, 12, 0, 0, 5), -1):
        assert parse_time(iso_ms(ms), "t") == ms
