"""A window or session batch's summary per source partition: how many records it read, failed,
deleted and found late, its offset range, its newest applied event time (stream time's advance), and
the tasks that read it (stream_time.split_partitions).

Two ways to the same rows, one dict per partition with records:
  * observed (`observed`/`from_observed`): aggregates observed over the batch's records before they
    are cached, so the job that fills the cache (the batch's write) computes them, and read from the
    cache's own plan (io.deltastate.CachedMetrics: the write reaches the cache through the state
    store's RDD, so its query never reports them). So a batch that writes its state through runs one
    Spark job. An observation aggregates globally, so each partition gets its own columns, for the
    partitions the store declares and any its stream times name; a record of another partition (a
    topic grown since) is counted apart, and the batch then asks `aggregated` instead, as it does
    when the counts do not add up to the rows the cache holds;
  * aggregated (`aggregated`): a group-by job of its own, for batches that need the summary before
    they plan (seeding the state, a run's first batch).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from pyspark.serializers import CPickleSerializer
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from deltastate.changelog.layout import LATE, RECORDS_IN, TOMBSTONES
from deltastate.engine.common.steps import Aggregate, Observe
from deltastate.engine.windowed.records import IS_DELETE, IS_LATE
from deltastate.engine.windowed.stream_time import READ_TASK
from deltastate.stores.definition import StoreDefinition

FAILED, LO, HI, BATCH_MAX, TASK_LO, TASK_HI = "failed", "lo", "hi", "batch_max", "task_lo", "task_hi"
FIELDS = (RECORDS_IN, FAILED, TOMBSTONES, LATE, LO, HI, BATCH_MAX, TASK_LO, TASK_HI)
_OTHER = "other_partitions"


@dataclass(frozen=True)
class Observed:
    """A summary observed on a batch's records (by name), for the partitions it has columns for."""

    name: str
    partitions: tuple[int, ...]


class PartitionSummary:
    """The summary's columns, built once per run (engine/common/steps.py): over the cached records'
    columns (partition, offset, reason, is_delete, is_late for window stores, the event time, null
    unless an applied event, and read_task)."""

    def __init__(self, spark: SparkSession, store: StoreDefinition) -> None:
        self.store = store
        failed, deleted = F.col("reason").isNotNull(), F.col(IS_DELETE)
        late = F.col(IS_LATE) if store.window else F.lit(False)
        self._stats: dict[str, tuple[str, Column | None, Column]] = {
            # name: (aggregate, condition within the partition or None, value)
            RECORDS_IN: ("count_if", None, F.lit(True)), FAILED: ("count_if", failed, F.lit(True)),
            TOMBSTONES: ("count_if", deleted, F.lit(True)), LATE: ("count_if", late, F.lit(True)),
            LO: ("min", None, F.col("offset")), HI: ("max", None, F.col("offset")),
            BATCH_MAX: ("max", None, F.col(store.event_time_field)),
            TASK_LO: ("min", None, F.col(READ_TASK)), TASK_HI: ("max", None, F.col(READ_TASK))}
        self.aggregate = Aggregate(spark, ["partition"], [
            F.count(F.lit(1)).alias(RECORDS_IN), F.count_if(failed).alias(FAILED),
            F.count_if(deleted).alias(TOMBSTONES), F.count_if(late).alias(LATE),
            F.min("offset").alias(LO), F.max("offset").alias(HI), F.max(store.event_time_field).alias(BATCH_MAX),
            F.min(READ_TASK).alias(TASK_LO), F.max(READ_TASK).alias(TASK_HI)])
        self._spark = spark
        self._observes: dict[tuple[int, ...], Observe] = {}

    def _observe(self, partitions: tuple[int, ...]) -> Observe:
        if partitions not in self._observes:
            part = F.col("partition")
            columns = [F.count_if(~part.isin(*partitions)).alias(_OTHER)]
            for p in partitions:
                here = part == F.lit(p)
                for name, (how, condition, value) in self._stats.items():
                    where = here if condition is None else here & condition
                    column = (F.count_if(where) if how == "count_if"
                              else getattr(F, how)(F.when(where, value)))
                    columns.append(column.alias(f"{name}_{p}"))
            self._observes[partitions] = Observe(self._spark, columns)
        return self._observes[partitions]

    def partitions_for(self, known: Iterable[int]) -> tuple[int, ...]:
        """The partitions an observation has columns for: the store's declared ones and `known`."""
        return tuple(sorted(set(range(self.store.source.partitions)) | set(known)))

    def observed(self, records: DataFrame, known: Iterable[int], name: str) -> tuple[DataFrame, Observed]:
        """records with the summary observed on them, for partitions_for(known); to be persisted,
        and read by from_observed once a job has filled the cache."""
        partitions = self.partitions_for(known)
        return self._observe(partitions)(records, name), Observed(name, partitions)

    @staticmethod
    def from_observed(cached: DataFrame, observed: Observed) -> list[dict] | None:
        """The summary rows of the partitions that had records, as `aggregated` gives them, from the
        filled cache of `observed` (persisted); None when a record came from a partition without
        columns, or the cache holds no summary or one that did not count each of its rows once (ask
        `aggregated` instead, which reads the cache)."""
        spark = cached.sparkSession
        jrow = spark._jvm.io.deltastate.CachedMetrics.of(cached._jdf, observed.name)
        if jrow is None:
            return None
        got = CPickleSerializer().loads(spark._jvm.org.apache.spark.sql.api.python.PythonSQLUtils.toPyRow(jrow))
        got = got.asDict(recursive=False)
        # Each cached row observed once: a partition of the cache computed twice would count twice.
        counted = got[_OTHER] + sum(got[f"{RECORDS_IN}_{p}"] for p in observed.partitions)
        if got[_OTHER] or counted != spark._jvm.io.deltastate.CachedMetrics.rows(cached._jdf):
            return None
        return [{"partition": p, **{name: got[f"{name}_{p}"] for name in FIELDS}}
                for p in observed.partitions if got[f"{RECORDS_IN}_{p}"]]

    def aggregated(self, records: DataFrame) -> list[dict]:
        """The summary rows by a job of their own."""
        return [{"partition": r["partition"], **{name: r[name] for name in FIELDS}}
                for r in self.aggregate(records).collect()]
