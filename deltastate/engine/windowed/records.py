"""The one pass over a window or session store's micro-batch: each record read from Kafka and
classified once, narrowed to what the rest of the batch reads, with its stream time and (window
stores) the range of its windows still open, then cached once.

Stream time needs every record of a source partition in offset order (kept by the task that reads
the partition: engine/windowed/stream_time.py), and lateness needs stream time; doing both in this pass lets
the per-partition counts, the late counts and the dead letters all come from the one cache. A record's raw bytes stay
in the cache only when it may be dead-lettered: it failed, or it is late (window stores: no window
open), or it could be (session stores: before the session close time; the merge decides).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from deltastate.engine.common.steps import Select
from deltastate.engine.windowed.lateness import session_close_time, window_close_time
from deltastate.engine.windowed.stream_time import (
    READ_TASK,
    STREAM_TIME,
    register_stream_time,
    stream_time_before,
    with_stream_time,
)
from deltastate.stores.definition import SessionSpec, StoreDefinition, WindowSpec

IS_EVENT, IS_DELETE, IS_LATE = "is_event", "is_delete", "is_late"
STORE_TIME = "store_time"  # session stores: the partition's stream time before the record
W_FIRST, W_LAST = "w_first", "w_last"  # starts of the first open and the last window of an event
_DEAD_LETTER_SOURCE = ("topic", "kafka_timestamp", "key", "value", "value_size")


def _is_delete(store: StoreDefinition) -> Column:
    rule = store.tombstone_rule
    cond = F.col("is_tombstone") if rule.null_value else F.lit(False)
    if rule.field:
        cond = cond | F.coalesce(F.col(rule.field) == F.lit(rule.equals), F.lit(False))
    return cond


def _floor_to(x: Column, step: int) -> Column:
    """The largest multiple of step at or below x (exact on bigint, negative x included)."""
    return x - F.pmod(x, F.lit(step))


def open_window_range(ts: Column, stream_time: Column, w: WindowSpec) -> tuple[Column, Column]:
    """(first, last): the starts of the first still-open and the last window containing ts; the
    event is late when first > last. Window starts are multiples of advance, and a window is open
    while its end (start + size) is greater than the close time, so the open ones are the suffix
    from the smallest multiple of advance greater than close time - size."""
    last = _floor_to(ts, w.advance_ms)
    first = _floor_to(F.greatest(F.lit(0), ts - F.lit(w.size_ms - w.advance_ms)), w.advance_ms)
    first_open = _floor_to(window_close_time(stream_time, w.grace_ms) - F.lit(w.size_ms), w.advance_ms) + F.lit(w.advance_ms)
    return F.greatest(first, first_open), last


def session_store_time(spec: SessionSpec) -> Column:
    """The session store's time before each record, for the merge's retention check. Where
    retention exceeds the gap, stream time with the record included reaches the same sessions: it
    differs from the time before only for a record that advances it, and then every session within
    gap of the record ends after both horizons. Otherwise batch_records keeps the time before."""
    return F.col(STREAM_TIME) if spec.retention_ms > spec.gap_ms else F.col(STORE_TIME)


def event_fields(store: StoreDefinition) -> list[str]:
    """The event fields a batch reads: the aggregations' sources and the event time."""
    return sorted({a.source_field for a in store.aggregations if a.source_field} | {store.event_time_field})


class RecordsPlan:
    """batch_records for every micro-batch of a run: the steps that depend on the store alone are
    built once (engine/common/steps.py); a batch adds only its stream times before it."""

    def __init__(self, spark: SparkSession, store: StoreDefinition) -> None:
        self.store = store
        valid = F.col("reason").isNull()
        deleting = _is_delete(store)
        self.ts = store.event_time_field
        fields = event_fields(store)
        self.narrow = Select(spark, [
            "partition", "offset", "key_str", "reason", *_DEAD_LETTER_SOURCE, (valid & deleting).alias(IS_DELETE),
            # Only an applied event moves stream time: the running max skips nulls.
            *[F.when(valid & ~deleting, F.col(f)).alias(f) for f in fields],
        ])
        narrow = ["partition", "offset", "key_str", "reason", *_DEAD_LETTER_SOURCE, IS_DELETE, *fields]
        event, stream_time = _is_event(), F.col(STREAM_TIME)
        self.window_range: Select | None = None
        if store.window:
            # Window stores need stream time only for the range of open windows: not cached.
            first, last = open_window_range(F.col(self.ts), stream_time, store.window)
            self.window_range = Select(spark, [*narrow, READ_TASK, first.alias(W_FIRST), last.alias(W_LAST)])
            timed = [*narrow, READ_TASK, W_FIRST, W_LAST]
            flags = [(event & (F.col(W_FIRST) > F.col(W_LAST))).alias(IS_LATE)]
            maybe_dead = ~valid | (event & (F.col(W_FIRST) > F.col(W_LAST)))
        else:
            spec = store.session
            assert spec is not None
            timed = [*narrow, STREAM_TIME, READ_TASK]
            flags = []  # sessions: the merge decides lateness; these are only the candidates
            # An event is late only if its merged session ends before the close time, and that
            # session ends at or after the event: events at or after the close time are never late.
            maybe_dead = ~valid | (event & (F.col(self.ts) < session_close_time(stream_time, spec.gap_ms, spec.grace_ms)))
        # The record before in the partition holds the time before (the carried one for the first).
        self.before = (F.lag(STREAM_TIME).over(Window.partitionBy("partition").orderBy("offset"))
                       if store.session and store.session.retention_ms <= store.session.gap_ms else None)
        if self.before is not None:
            timed.append(STORE_TIME)
        self.last = Select(spark, [*[c for c in timed if c not in _DEAD_LETTER_SOURCE], *flags,
                                   *[F.when(maybe_dead, F.col(c)).alias(c) for c in _DEAD_LETTER_SOURCE]])
        register_stream_time(spark)

    def __call__(self, classified: DataFrame, prev_times: dict[int, int]) -> DataFrame:
        timed = with_stream_time(self.narrow(classified), prev_times, self.ts, registered=True)
        if self.window_range is not None:
            timed = self.window_range(timed)
        elif self.before is not None:
            timed = timed.select("*", F.coalesce(self.before, stream_time_before(prev_times)).alias(STORE_TIME))
        return self.last(timed)


def batch_records(classified: DataFrame, store: StoreDefinition, prev_times: dict[int, int]) -> DataFrame:
    """The micro-batch's classified records, narrowed to what is cached: partition, offset, key_str,
    reason, is_delete, the event fields, read_task, (session stores) stream_time and, where
    session_store_time needs it, store_time, (window stores)
    w_first, w_last and is_late, and the raw columns of the dead-letter table, null unless the record
    may be dead-lettered. flag_columns adds the rest. A run builds a RecordsPlan once instead."""
    return RecordsPlan(classified.sparkSession, store)(classified, prev_times)


def _is_event() -> Column:
    return F.col("reason").isNull() & ~F.col(IS_DELETE)


def flag_columns(store: StoreDefinition) -> list[Column]:
    """is_event, and is_late for session stores (always false here: the merge decides), derived from
    the cached records rather than stored in the cache (each cached column costs every record)."""
    return [_is_event().alias(IS_EVENT), *([] if store.window else [F.lit(False).alias(IS_LATE)])]
