"""The changelog's rules, once each, for every reader: the engine, maintenance, snapshots and fresh reads.

latest record per key   a store key's state is its record with the greatest (epoch, batch_id); a key
                        whose latest record is a delete is absent. Spark flavour (one native
                        aggregate: max_by over a struct, on the executors) and DuckDB flavour (for
                        changelog commits read from Parquet, where a commit version breaks ties).
stream time             per source partition, the newest applied event time; audit rows record it
                        per batch as JSON {partition: ms}, and a partition's stream time is the
                        maximum over the rows that count.
retention               which window or session entries a store still holds at a stream time, as
                        Kafka Streams' segmented RocksDB stores decide it (retention_horizon).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from deltastate.changelog.layout import OP, OP_DELETE, ORDER_COLUMNS, SOURCE_PARTITION, STREAM_TIMES, WINDOW_END, WINDOW_START
from deltastate.stores.definition import SessionSpec, WindowSpec

if TYPE_CHECKING:  # pyspark is slow to import; callers already hold a session
    from pyspark.sql import Column, DataFrame


def record_order() -> Column:
    """The order of one store key's records: later epoch (lineage), then later micro-batch."""
    from pyspark.sql import functions as F

    return F.struct(*[F.col(c) for c in ORDER_COLUMNS])


def latest_per_key(records: DataFrame, keys: Sequence[str], carried: Sequence[str], *,
                   live_only: bool = True) -> DataFrame:
    """Each store key's latest record: `keys` then `carried` (which must include op when live_only),
    tombstoned keys dropped when live_only."""
    from pyspark.sql import functions as F

    columns = list(dict.fromkeys([*carried, *([OP] if live_only else [])]))
    latest = (records.groupBy(*keys)
              .agg(F.max_by(F.struct(*[F.col(c) for c in columns]), record_order()).alias("_latest"))
              .select(*keys, "_latest.*"))
    if not live_only:
        return latest
    live = latest.where(F.col(OP) != F.lit(OP_DELETE))
    return live if OP in carried else live.drop(OP)


def latest_per_key_sql(source: str, keys: Sequence[str], *, has_epoch: bool = True, tiebreak: str | None = None) -> str:
    """DuckDB SQL for each key's latest record of `source` (a relation name or a parenthesised
    query), tombstones included; `tiebreak` orders records of one batch (a commit version)."""
    order = [*(["epoch DESC"] if has_epoch else []), "batch_id DESC", *([f"{tiebreak} DESC"] if tiebreak else [])]
    return (f"SELECT * EXCLUDE (_rank) FROM (SELECT *, row_number() OVER (PARTITION BY {', '.join(keys)} "
            f"ORDER BY {', '.join(order)}) AS _rank FROM {source}) WHERE _rank = 1")


def merge_stream_times(times: dict[int, int], recorded: Iterable[str | None]) -> dict[int, int]:
    """times advanced by audit rows' stream-time JSON texts (None or '{}' for a batch that applied
    no event): each partition keeps its maximum."""
    merged = dict(times)
    for text in recorded:
        for partition, ms in json.loads(text or "{}").items():
            merged[int(partition)] = max(merged.get(int(partition), ms), int(ms))
    return merged


def stream_times_frame(intake: DataFrame) -> DataFrame:
    """(source_partition int, stream_time bigint) per partition, from the audit rows of `intake`."""
    from pyspark.sql import functions as F

    per_batch = intake.select(F.explode(F.from_json(STREAM_TIMES, "map<string,bigint>")).alias("p", "t"))
    return per_batch.groupBy(F.col("p").cast("int").alias(SOURCE_PARTITION)).agg(F.max("t").alias("stream_time"))


# Retention, as Kafka Streams' window and session stores apply it (AbstractRocksDBSegmentedBytesStore):
# the store keeps its own observed time, the largest segment timestamp it has stored, and every read
# (fetch, findSessions, all) starts at observed time - retention + 1. The segment timestamp is a
# window's start (WindowKeySchema) and a session's end (SessionKeySchema). For a window store the
# largest stored start is the last window of the newest event, the multiple of advance at or below
# stream time; for a session store the largest stored end is stream time itself (the newest event is
# never late, and its session ends at it).


def retained_column(spec: WindowSpec | SessionSpec) -> str:
    """The entry bound retention compares: window_start for windows, window_end for sessions."""
    return WINDOW_START if isinstance(spec, WindowSpec) else WINDOW_END


def store_time(spec: WindowSpec | SessionSpec, stream_time: int) -> int:
    """The store's observed time at a partition's stream time (see above)."""
    if isinstance(spec, WindowSpec):
        return stream_time - stream_time % spec.advance_ms
    return stream_time


def retention_horizon(spec: WindowSpec | SessionSpec, stream_time: int) -> int:
    """An entry is retained while its retained_column is greater than this."""
    return store_time(spec, stream_time) - spec.retention_ms


def is_retained(spec: WindowSpec | SessionSpec, window_start: int, window_end: int, stream_time: int | None) -> bool:
    """Whether the store still holds (and reads return) the entry at the partition's stream time;
    every entry is held while the partition has none."""
    if stream_time is None:
        return True
    edge = window_start if isinstance(spec, WindowSpec) else window_end
    return edge > retention_horizon(spec, stream_time)
