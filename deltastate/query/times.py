"""One parser for every time a read accepts: epoch milliseconds or ISO-8601.

Window bounds in the snapshot are epoch millis (Kafka Streams' timestamps), so everything is turned
into an int of milliseconds. ISO-8601 without a zone means UTC (never the host's zone: a query must
not change meaning with the machine that runs it)."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from deltastate.query.errors import ParameterError

_INTEGER = re.compile(r"^[+-]?\d+$")
# Beyond these, datetime cannot represent the instant; DuckDB BIGINT still could, but no window is there.
MIN_MS = -62_135_596_800_000  # 0001-01-01T00:00:00Z
MAX_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z


def parse_time(value: str | int | datetime | None, parameter: str) -> int | None:
    """Epoch millis of value; None stays None (an open bound). ParameterError names the parameter."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise ParameterError(parameter, f"expected epoch millis or ISO-8601, got {value!r}")
    if isinstance(value, int):
        return _bounded(value, parameter)
    if isinstance(value, datetime):
        return _from_datetime(value)
    text = str(value).strip()
    if not text:
        raise ParameterError(parameter, "expected epoch millis or ISO-8601, got an empty value")
    if _INTEGER.match(text):
        return _bounded(int(text), parameter)
    iso = text[:-1] + "+00:00" if text[-1] in "zZ" else text
    try:
        parsed = datetime.fromisoformat(iso)
    except ValueError:
        raise ParameterError(parameter, f"expected epoch millis or ISO-8601, got {text!r}") from None
    return _from_datetime(parsed)


def _from_datetime(value: datetime) -> int:
    aware = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    # timestamp() is a float: exact to the microsecond for any real date, then floored to millis.
    delta = aware - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400_000_000 + delta.seconds * 1_000_000 + delta.microseconds) // 1000


def _bounded(ms: int, parameter: str) -> int:
    if not MIN_MS <= ms <= MAX_MS:
        raise ParameterError(parameter, f"{ms} is outside the supported epoch millis range [{MIN_MS}, {MAX_MS}]")
    return ms


def iso_ms(ms: int | None) -> str | None:
    """Epoch millis as ISO-8601 UTC with millisecond precision (for humans; JSON keeps the ints)."""
    if ms is None:
        return None
    dt = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


__all__ = ["MAX_MS", "MIN_MS", "iso_ms", "parse_time"]
