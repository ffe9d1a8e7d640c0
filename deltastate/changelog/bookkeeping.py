"""The bookkeeping columns of a changelog row, built in one place for every writer: the engine's
key-value and window/session batches, a migration's seed, retention's tombstones and the restore
benchmark's generated history.

Each writer says what its rows are (which op, from which source record, written by which lineage,
epoch and batch); this module turns that into layout.BOOKKEEPING_COLUMNS, in their order, with
their names and types, so a bookkeeping column is added or retyped here and nowhere else.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from deltastate.changelog.layout import (
    BATCH_ID,
    BOOKKEEPING_COLUMNS,
    EPOCH,
    EVENT_TIME,
    LINEAGE_ID,
    OP,
    SEGMENT,
    SOURCE_OFFSET,
    SOURCE_PARTITION,
    VALUE_VERSION,
    WRITE_TIME,
    segment_of,
)

if TYPE_CHECKING:
    from pyspark.sql import Column


def bookkeeping_columns(**given: Column | int | str | None) -> list[Column]:
    """The bookkeeping columns, in the changelog's order (the arguments of bookkeeping_by_name)."""
    return list(bookkeeping_by_name(**given).values())  # type: ignore[arg-type]


def bookkeeping_by_name(*, op: Column | str, value_version: Column | int, source_partition: Column | int,
                        source_offset: Column | int, epoch: Column | int, batch_id: Column | int,
                        lineage_id: Column | str, event_time: Column, write_time: Column | None = None,
                        segment: Column | int | None = None) -> dict[str, Column]:
    """Column name -> the named, typed column, in the changelog's order. Plain values become
    literals; write_time defaults to the commit's clock, segment to the one of (epoch, batch_id)
    when both are plain."""
    from pyspark.sql import Column
    from pyspark.sql import functions as F

    if segment is None:
        if isinstance(epoch, Column) or isinstance(batch_id, Column):
            raise ValueError("segment is needed when epoch or batch_id is a column")
        segment = segment_of(epoch, batch_id)
    given = {OP: op, VALUE_VERSION: value_version, SOURCE_PARTITION: source_partition, SOURCE_OFFSET: source_offset,
             EPOCH: epoch, BATCH_ID: batch_id, LINEAGE_ID: lineage_id, EVENT_TIME: event_time,
             WRITE_TIME: F.current_timestamp() if write_time is None else write_time, SEGMENT: segment}
    assert set(given) == {name for name, _ in BOOKKEEPING_COLUMNS}
    return {name: (value if isinstance(value, Column) else F.lit(value)).cast(spark_type).alias(name)
            for name, spark_type in BOOKKEEPING_COLUMNS for value in (given[name],)}


def run_bookkeeping(*, epoch: int, **given: Column | int | str | None) -> Callable[[int], list[Column]]:
    """batch_id -> bookkeeping_columns(epoch=epoch, batch_id=batch_id, **given), for every batch of a
    run: the columns are built once, and a batch gets only its own batch_id and segment literals.
    Each column is several py4j calls; a micro-batch building them all again paid ~0.1 s for it."""
    from pyspark.sql import functions as F

    fixed = bookkeeping_by_name(epoch=epoch, batch_id=0, **given)  # type: ignore[arg-type]
    types = dict(BOOKKEEPING_COLUMNS)

    def for_batch(batch_id: int) -> list[Column]:
        own = {BATCH_ID: F.lit(batch_id).cast(types[BATCH_ID]).alias(BATCH_ID),
               SEGMENT: F.lit(segment_of(epoch, batch_id)).cast(types[SEGMENT]).alias(SEGMENT)}
        return [own.get(name, column) for name, column in fixed.items()]

    return for_batch
