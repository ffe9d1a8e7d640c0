"""Kafka Streams' closing and retention rules at their boundaries, from worked examples.

Each example is worked by hand from Kafka Streams' source (4.x):
  KStreamWindowAggregate         windowCloseTime = observedStreamTime - grace; a window takes the
                                 record when windowEnd > windowCloseTime
  KStreamSessionWindowAggregate  windowCloseTime = observedStreamTime - grace - inactivityGap; the
                                 record is dropped when the merged session's end < windowCloseTime;
                                 findSessions(ts - gap, ts + gap) picks the sessions to merge
  AbstractRocksDBSegmentedBytesStore  reads start at max(from, observedStreamTime - retention + 1),
                                 its own observed time being the largest segment timestamp put:
                                 a window's start (WindowKeySchema), a session's end (SessionKeySchema)
"""

from __future__ import annotations

import pytest

from deltastate.changelog.rules import is_retained, retained_column, retention_horizon, store_time
from deltastate.engine.windowed.lateness import session_close_time, session_late, window_close_time
from deltastate.stores.definition import SessionSpec, WindowSpec

HOPPING = WindowSpec(size_ms=5_000, advance_ms=1_000, grace_ms=2_000, retention_ms=10_000)
TUMBLING = WindowSpec(size_ms=60_000, advance_ms=60_000, grace_ms=5_000, retention_ms=21_600_000)
SESSIONS = SessionSpec(gap_ms=100, grace_ms=30, retention_ms=2_000)


# -- window lateness -----------------------------------------------------------------------------

@pytest.mark.parametrize(("window_end", "stream_time", "open_"), [
    (8_000, 9_999, True),    # close time 7_999 < end
    (8_000, 10_000, False),  # close time 8_000 == end: closed (windowEnd > windowCloseTime fails)
    (8_000, 10_001, False),
    (9_000, 10_000, True),   # the next hopping window is still open
])
def test_window_closes_at_end_plus_grace(window_end: int, stream_time: int, open_: bool) -> None:
    assert (window_end > window_close_time(stream_time, HOPPING.grace_ms)) is open_


# -- session lateness ----------------------------------------------------------------------------

@pytest.mark.parametrize(("merged_end", "late"), [
    (869, True),   # 1 ms before the close time
    (870, False),  # exactly at it: kept (late only when end < close time)
    (871, False),
    (900, False),  # ended before stream time - grace = 970, but within the gap: Kafka Streams merges
])
def test_session_close_time_includes_the_gap(merged_end: int, late: bool) -> None:
    # stream time 1_000, grace 30, gap 100: close time 870.
    assert session_close_time(1_000, SESSIONS.gap_ms, SESSIONS.grace_ms) == 870
    assert session_late(merged_end, 1_000, SESSIONS.gap_ms, SESSIONS.grace_ms) is late


# -- retention -------------------------------------------------------------------------------------

def test_retention_compares_a_window_start_and_a_session_end() -> None:
    assert retained_column(HOPPING) == "window_start"
    assert retained_column(SESSIONS) == "window_end"


@pytest.mark.parametrize(("start", "retained"), [
    (10_000, False),  # start == store time (20_000) - retention: gone
    (11_000, True),   # the next window start
    (6_000, False),   # [6_000, 11_000) ends after stream time - retention (10_500) but starts too early
])
def test_window_retention_by_start_at_the_store_time(start: int, retained: bool) -> None:
    """Stream time 20_500: the newest event's last window starts at 20_000, the largest start the
    window store has put: its observed time. Reads start at 20_000 - 10_000 + 1."""
    assert store_time(HOPPING, 20_500) == 20_000
    assert retention_horizon(HOPPING, 20_500) == 10_000
    assert is_retained(HOPPING, start, start + HOPPING.size_ms, 20_500) is retained


@pytest.mark.parametrize(("start", "retained"), [(9_000, False), (10_000, True)])
def test_window_retention_counts_from_the_last_window_start_not_stream_time(start: int, retained: bool) -> None:
    """Retention 10_500 (not a multiple of advance), stream time 20_500: reads start at
    20_000 - 10_500 + 1 = 9_501, so the window starting at 10_000 is still returned, although
    stream time - retention is 10_000."""
    spec = WindowSpec(size_ms=5_000, advance_ms=1_000, grace_ms=2_000, retention_ms=10_500)
    assert is_retained(spec, start, start + spec.size_ms, 20_500) is retained


@pytest.mark.parametrize(("stream_time", "retained"), [
    (21_659_999, True),   # store time 21_600_000 (the window starting there): horizon 0
    (21_660_000, False),  # store time 21_660_000: horizon 60_000, and [60_000, 120_000) starts at it
])
def test_tumbling_window_leaves_when_a_new_window_starts(stream_time: int, retained: bool) -> None:
    assert is_retained(TUMBLING, 60_000, 120_000, stream_time) is retained


@pytest.mark.parametrize(("end", "retained"), [(7_999, False), (8_000, False), (8_001, True)])
def test_session_retention_by_end(end: int, retained: bool) -> None:
    # stream time 10_000, retention 2_000: reads start at 8_001.
    assert is_retained(SESSIONS, end - 50, end, 10_000) is retained


def test_no_stream_time_retains_everything() -> None:
    assert is_retained(HOPPING, 0, 5_000, None)
    assert is_retained(SESSIONS, 0, 0, None)
