"""Stream time, as Kafka Streams keeps it: per source partition, the largest event time seen so far,
advanced record by record in offset order.

Between micro-batches it lives in the intake audit table (each batch's newest event time per
partition); within a batch it is a running max over the partition's records in offset order, kept by
the task that reads the partition (jvm/src StreamTime) so that no shuffle is needed. Spark's Kafka
source reads a partition's offset range in one task unless told to split it (minPartitions,
maxRecordsPerPartition, neither of which deltastate sets); `split_partitions` checks that it did not.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from deltastate.changelog.intake import newest_lineage_audit, stream_times
from deltastate.changelog.layout import INTAKE
from deltastate.changelog.txn_log import UnknownFromLog
from deltastate.config import Settings
from deltastate.engine.common.lineage import Lineage
from deltastate.stores.definition import StoreDefinition

STREAM_TIME = "stream_time"
READ_TASK = "read_task"  # the Spark partition that read the record, for split_partitions
_FUNCTION = "deltastate_stream_time"


def load_stream_times(spark: SparkSession, settings: Settings, store: StoreDefinition, lineage: Lineage,
                      before_batch: int) -> dict[int, int]:
    """Partition -> stream time after every batch committed before `before_batch` of this lineage
    (and every batch of earlier lineages). A replayed batch must see the stream time it first saw.

    Read from the lineage's newest audit row (txn_log names its batch): its totals_before, advanced
    by its own batch unless it is the batch being replayed. A lineage's first batch, and tables
    whose rows or log cannot answer so, take the maximum over the history instead."""
    try:
        newest = newest_lineage_audit(spark, settings, store, lineage.app_id(INTAKE), lineage.lineage_id)
    except UnknownFromLog:
        newest = None
    if newest is None or newest.carried is None or newest.batch_id > before_batch:
        return scan_stream_times(spark, settings, store, lineage, before_batch)
    carried = dict(newest.carried.stream_times)
    if newest.batch_id == before_batch:
        return carried
    return advance(carried, dict(newest.stream_times))


def scan_stream_times(spark: SparkSession, settings: Settings, store: StoreDefinition, lineage: Lineage,
                      before_batch: int) -> dict[int, int]:
    """load_stream_times as the maximum over every audit row it covers."""
    return stream_times(spark, settings, store, before=(lineage.lineage_id, before_batch))


def _lookup_sql(prev: dict[int, int]) -> str:
    """SQL for the partition's stream time before the batch: one expression parsed by the JVM, where
    building it from literal columns cost a py4j round trip per literal."""
    if not prev:
        return "CAST(NULL AS BIGINT)"
    pairs = ", ".join(f"{int(p)}, CAST({int(ms)} AS BIGINT)" for p, ms in sorted(prev.items()))
    return f"element_at(map({pairs}), CAST(`partition` AS INT))"


def stream_time_before(prev: dict[int, int]) -> Column:
    """The partition's stream time before the batch (null where it has none), per record."""
    return F.expr(_lookup_sql(prev))


def register_stream_time(spark: SparkSession) -> None:
    spark._jvm.io.deltastate.Udafs.registerStreamTime(spark._jsparkSession, _FUNCTION)


def running_stream_time(prev: dict[int, int], ts: str) -> Column:
    """The running stream time of register_stream_time's function (registered once per session),
    as one expression."""
    field = ts.replace("`", "``")
    return F.expr(f"{_FUNCTION}(CAST(`partition` AS INT), CAST(`offset` AS BIGINT), CAST(`{field}` AS BIGINT), "
                  f"{_lookup_sql(prev)})")


def with_stream_time(events: DataFrame, prev: dict[int, int], ts: str, *, registered: bool = False) -> DataFrame:
    """Adds `stream_time`: max(stream time before the batch, event times of the partition's events
    up to and including this one), and `read_task`. `events` must come straight from the Kafka
    source's tasks (no shuffle in between), which is what foreachBatch hands over."""
    if not registered:
        register_stream_time(events.sparkSession)
    return events.select("*", running_stream_time(prev, ts).alias(STREAM_TIME),
                         F.spark_partition_id().alias(READ_TASK))


def split_partitions(task_span: dict[int, tuple[int, int]]) -> list[int]:
    """Source partitions whose records two tasks read ({partition: (min, max) read_task}): their
    running stream time would be wrong, so the batch must not be applied."""
    return sorted(p for p, (lo, hi) in task_span.items() if lo != hi)


def advance(prev: dict[int, int], batch_max: dict[int, int]) -> dict[int, int]:
    out = dict(prev)
    for p, ms in batch_max.items():
        out[p] = max(out.get(p, ms), ms)
    return out
