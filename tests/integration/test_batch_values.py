"""A micro-batch's own values (batch id, segment, write time) reach its rows by reference, not as
literals in the generated code (changelog/bookkeeping.py, io.deltastate.BatchValue), through real
Spark: each batch's rows carry its values, and a plan built again for the next batch compiles no
new code, where the same plan with literals compiles new code every batch."""

from __future__ import annotations

import time

import pytest
from pyspark.sql import functions as F

from deltastate.changelog.bookkeeping import BATCH_VALUE_FUNCTION, batch_bookkeeping, with_batch_literals
from deltastate.changelog.layout import BATCH_ID, SEGMENT, WRITE_TIME, segment_of

pytestmark = pytest.mark.integration
EPOCH = 2


@pytest.fixture()
def changes(spark):
    return spark.createDataFrame([(f"k{i}", i % 4, i) for i in range(50)],
                                 "key string, partition int, offset bigint")


def _columns():
    return batch_bookkeeping(op=F.lit("put"), value_version=1, source_partition=F.col("partition"),
                             source_offset=F.col("offset"), epoch=EPOCH, lineage_id="lineage",
                             event_time=F.timestamp_micros(F.col("offset")))


def _compiles(spark) -> int:
    return spark._jvm.org.apache.spark.metrics.source.CodegenMetrics.METRIC_COMPILATION_TIME().getCount()


def test_each_batch_carries_its_own_values(spark, changes) -> None:
    columns = _columns()
    for batch_id in (0, 7, 4_999, 5_000, 123_456_789):
        before = time.time()
        rows = changes.withColumn("k", F.col("key")).transform(
            lambda df, b=batch_id: with_batch_literals(df, EPOCH, b)).select(*columns).collect()
        after = time.time()
        assert len(rows) == 50
        assert {(r[BATCH_ID], r[SEGMENT]) for r in rows} == {(batch_id, segment_of(EPOCH, batch_id))}
        written = {r[WRITE_TIME].timestamp() for r in rows}
        assert len(written) == 1 and before - 0.001 <= written.pop() <= after + 0.001


def test_a_new_batch_compiles_no_new_code(spark, changes) -> None:
    columns = _columns()

    def by_reference(batch_id: int) -> None:
        with_batch_literals(changes, EPOCH, batch_id).select(*columns).where(F.col("offset") >= 0).collect()

    def by_literal(batch_id: int) -> None:  # the same values as literals: the reference this is measured against
        (changes.withColumn("_batch_id", F.lit(batch_id)).withColumn("_segment", F.lit(segment_of(EPOCH, batch_id)))
         .withColumn("_write_time_us", F.lit(time.time_ns() // 1000))
         .select(*columns).where(F.col("offset") >= 0).collect())

    for run in (by_reference, by_literal):
        run(0)  # the plan's first batch compiles its code
        before = _compiles(spark)
        for batch_id in range(1, 6):
            run(batch_id)
        new_code = _compiles(spark) - before
        if run is by_reference:
            assert new_code == 0
        else:
            assert new_code >= 5  # at least one class per batch


def test_a_batch_value_is_a_long_literal(spark, changes) -> None:
    with_batch_literals(changes, EPOCH, 0)  # registers the function
    with pytest.raises(Exception, match="a batch value is a long literal, not"):
        changes.select(F.call_function(BATCH_VALUE_FUNCTION, F.col("offset"))).collect()
