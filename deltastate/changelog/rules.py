"""The changelog's rules, once each, for every reader: the engine, maintenance, snapshots and fresh reads.

latest record per key   a store key's state is its record with the greatest (epoch, batch_id); a key
                        whose latest record is a delete is absent. Spark flavour (one native
                        aggregate: max_by over a struct, on the executors) and DuckDB flavour (for
                        changelog commits read from Parquet, where a commit version breaks ties).
stream time             per source partition, the newest applied event time; audit rows record it
                        per batch as JSON {partition: ms}, and a partition's stream time is the
                        maximum over the rows that count.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from deltastate.changelog.layout import OP, OP_DELETE, ORDER_COLUMNS

if TYPE_CHECKING:  # pyspark is slow to import; callers already hold a session
    from pyspark.sql import Column, DataFrame

STREAM_TIMES = "stream_times"  # the audit column: {partition: newest applied event time} of one batch


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
    return per_batch.groupBy(F.col("p").cast("int").alias("source_partition")).agg(F.max("t").alias("stream_time"))
