"""Durations as Kafka and Spark users write them ("500ms", "5s", "30min", "6h", "7d")."""

from __future__ import annotations

import re

_UNITS_MS = {"ms": 1, "s": 1000, "sec": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}
_PATTERN = re.compile(r"^\s*(\d+)\s*(ms|sec|s|min|m|h|d)\s*$")


def parse_duration_ms(text: str | int | None) -> int | None:
    """Milliseconds for a duration string; ints are taken as milliseconds; None stays None."""
    if text is None:
        return None
    if isinstance(text, bool):
        raise ValueError(f"not a duration: {text!r}")
    if isinstance(text, int):
        if text < 0:
            raise ValueError(f"negative duration: {text}")
        return text
    match = _PATTERN.match(str(text))
    if not match:
        raise ValueError(f"not a duration: {text!r} (use e.g. 500ms, 5s, 30min, 6h, 7d)")
    return int(match.group(1)) * _UNITS_MS[match.group(2)]
