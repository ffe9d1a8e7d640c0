"""When a window or session store takes an event: Kafka Streams' closing rules, once each.

Each function is plain arithmetic and comparison, so the same code decides on Python ints (the
rule tests) and builds Spark columns: the first pass over a micro-batch, and each record's close
time that the session merge (sessions.py) compares against.
Stream time is the partition's, the record's own event time included, as Kafka Streams' aggregate
processors advance it before deciding.

Windows (KStreamWindowAggregate): close time = stream time - grace; a window takes the event while
its end is greater than the close time, that is while stream time < end + grace. An event none of
whose windows is open is late.

Sessions (KStreamSessionWindowAggregate): close time = stream time - grace - gap; the event is first
merged with every session it reaches (findSessions), and it is late when the merged session's end
is less than the close time. The gap is in the close time because a session ending at e can still
be extended by an event up to e + gap.

Which sessions the merge reaches also depends on the store's retention (changelog/rules.py
is_retained), judged at the stream time before the record: Kafka Streams' session store advances
its own observed time when the record's session is stored, after the lookup.
"""

from __future__ import annotations

from typing import TypeVar

T = TypeVar("T")  # int, or a Spark Column: both support the arithmetic and comparisons below


def window_close_time(stream_time: T, grace_ms: int) -> T:
    return stream_time - grace_ms  # type: ignore[operator]


def session_close_time(stream_time: T, gap_ms: int, grace_ms: int) -> T:
    return stream_time - grace_ms - gap_ms  # type: ignore[operator]


def session_late(merged_end: T, stream_time: T, gap_ms: int, grace_ms: int) -> T:
    """Whether an event whose merged session ends at merged_end is late. The merged end is never
    below the event's own time, so an event at or after the close time is never late."""
    return merged_end < session_close_time(stream_time, gap_ms, grace_ms)  # type: ignore[operator,return-value]

