"""The bookkeeping columns of a changelog row, built in one place for every writer: the engine's
key-value and window/session batches, a migration's seed, retention's tombstones and the restore
benchmark's generated history.

Each writer says what its rows are (which op, from which source record, written by which lineage,
epoch and batch); this module turns that into layout.BOOKKEEPING_COLUMNS, in their order, with
their names and types, so a bookkeeping column is added or retyped here and nowhere else.
"""

from __future__ import annotations

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
    from pyspark.sql import Column, DataFrame


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


# A batch's own bookkeeping values, as columns its rows carry into the select that
# batch_bookkeeping's columns are part of (Spark folds them into that projection).
BATCH_LITERAL, SEGMENT_LITERAL, WRITE_TIME_LITERAL = "_batch_id", "_segment", "_write_time_us"
# The SQL function io.deltastate.BatchValue registers: a long literal read by reference.
BATCH_VALUE_FUNCTION = "deltastate_batch_value"


def batch_bookkeeping(*, epoch: int, **given: Column | int | str | None) -> list[Column]:
    """bookkeeping_columns for every batch of a run, built once: the batch id, segment and write
    time are read from the columns with_batch_literals adds, so a prebuilt select
    (engine/common/steps.py) serves every batch. Each column built again is several py4j calls per
    batch."""
    from pyspark.sql import functions as F

    return bookkeeping_columns(epoch=epoch, batch_id=F.col(BATCH_LITERAL), segment=F.col(SEGMENT_LITERAL),
                               write_time=F.timestamp_micros(F.col(WRITE_TIME_LITERAL)), **given)


def with_batch_literals(rows: DataFrame, epoch: int, batch_id: int) -> DataFrame:
    """rows with the batch's own values that batch_bookkeeping's columns read: its id, segment and
    write time (now). Each is a BatchValue (jvm/src), not a literal: a literal is written into the
    generated code, which would then be new code, compiled again and run interpreted, every batch.
    One py4j call (io.deltastate.Udafs.withBatchValues), in one projection: each withColumn would be
    a new plan that Spark analyzes whole, and a window batch's plan is large."""
    import time

    from pyspark.sql.classic.dataframe import DataFrame as ClassicDataFrame

    spark = rows.sparkSession
    return ClassicDataFrame(spark._jvm.io.deltastate.Udafs.withBatchValues(
        rows._jdf, BATCH_VALUE_FUNCTION, BATCH_LITERAL, SEGMENT_LITERAL, WRITE_TIME_LITERAL, batch_id,
        segment_of(epoch, batch_id), time.time_ns() // 1000), spark)
