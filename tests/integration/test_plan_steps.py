"""Steps built once per run (engine/common/steps.py) answer what PySpark's own calls answer, in one
py4j round trip where PySpark's pay one per column; the stream time lookup built as one SQL
expression answers what the literal map answered."""

from __future__ import annotations

import contextlib
import threading

import py4j.clientserver
import py4j.protocol as proto
import pytest
from pyspark.sql import functions as F

from deltastate.engine.common.steps import Aggregate, Join, Observe, Select, SortWithinPartitions, Where
from deltastate.engine.windowed.stream_time import stream_time_before


@contextlib.contextmanager
def round_trips():
    """Counts the py4j commands this block's thread sends to the JVM. The garbage collector's
    releases of Java objects (py4j's memory-delete command, sent whenever a collection runs) are not
    the block's calls, and are not counted."""
    counted = {"n": 0}
    send = py4j.clientserver.ClientServerConnection.send_command
    me = threading.get_ident()
    release = proto.MEMORY_COMMAND_NAME + proto.MEMORY_DEL_SUBCOMMAND_NAME

    def counting(self, command):
        if threading.get_ident() == me and not command.startswith(release):
            counted["n"] += 1
        return send(self, command)

    py4j.clientserver.ClientServerConnection.send_command = counting
    try:
        yield counted
    finally:
        py4j.clientserver.ClientServerConnection.send_command = send


@pytest.fixture()
def events(spark):
    rows = [(k % 3, k % 5, k, float(k) / 2) for k in range(40)]
    return spark.createDataFrame(rows, "g int, p int, n long, x double")


def _rows(df):
    return sorted(tuple(r) for r in df.collect())


def test_select_answers_as_pyspark_in_one_round_trip(spark, events):
    columns = ["g", (F.col("n") * 2).alias("n2"), F.when(F.col("x") > 5, F.col("p")).alias("p_over"),
               *[(F.col("n") + i).alias(f"c{i}") for i in range(10)]]
    step = Select(spark, columns)
    assert _rows(step(events)) == _rows(events.select(*columns))
    with round_trips() as built:
        step(events)
    with round_trips() as own:
        events.select(*columns)
    assert built["n"] == 1
    assert own["n"] > len(columns)  # the list crosses element by element


def test_aggregate_answers_as_pyspark(spark, events):
    aggregations = [F.count(F.lit(1)).alias("records"), F.sum("n").alias("total"), F.max("x").alias("top")]
    step = Aggregate(spark, ["g", F.col("p").alias("part")], aggregations)
    assert _rows(step(events)) == _rows(events.groupBy("g", F.col("p").alias("part")).agg(*aggregations))
    with round_trips() as built:
        step(events)
    assert built["n"] == 2  # groupBy, then agg


def test_join_answers_as_pyspark(spark, events):
    right = events.where(F.col("n") % 2 == 0).select("g", "p", F.col("n").alias("m"))
    for how in ("left", "inner", "left_anti"):
        step = Join(spark, ["g", "p"], how)
        assert _rows(step(events, right)) == _rows(events.join(right, ["g", "p"], how))


def test_where_and_sort_within_partitions_answer_as_pyspark(spark, events):
    condition = (F.col("n") % 3 == 1) & ~(F.col("x") > 15)
    assert _rows(Where(condition)(events)) == _rows(events.where(condition))
    parted = events.repartition(3, "g")
    ordered = SortWithinPartitions(spark, ["g", F.col("n").desc(), "p"])(parted)
    expected = parted.sortWithinPartitions("g", F.col("n").desc(), "p")
    by_partition = F.spark_partition_id().alias("part")
    assert ordered.select(by_partition, "n").collect() == expected.select(by_partition, "n").collect()
    with round_trips() as built:
        Where(condition)(events)
    assert built["n"] == 1


def test_observe_reports_what_an_aggregate_answers(spark, events):
    metrics = [F.count_if(F.col("g") == 1).alias("ones"), F.max("n").alias("top"), F.sum("x").alias("sum_x")]
    step = Observe(spark, metrics)
    observed = step(events, "m1")
    assert _rows(observed) == _rows(events)  # observing leaves the rows alone
    jrow = observed._jdf.queryExecution().observedMetrics().get("m1").get()
    expected = events.agg(*metrics).first()
    assert [jrow.get(i) for i in range(3)] == [expected["ones"], expected["top"], expected["sum_x"]]
    with round_trips() as built:
        step(events, "m2")
    assert built["n"] == 1


def test_steps_refuse_empty_column_lists(spark):
    with pytest.raises(ValueError, match="at least one column"):
        Select(spark, [])
    with pytest.raises(ValueError, match="at least one aggregation"):
        Aggregate(spark, ["g"], [])
    with pytest.raises(ValueError, match="at least one metric"):
        Observe(spark, [])


@pytest.mark.parametrize("before", [{}, {0: 5, 3: 9_000_000_000_000}, {1: -4}])
def test_stream_time_before_reads_the_partitions_time(spark, before):
    parts = spark.createDataFrame([(p,) for p in range(5)], "partition int")
    got = {r["partition"]: r["t"] for r in parts.select("partition", stream_time_before(before).alias("t")).collect()}
    assert got == {p: before.get(p) for p in range(5)}
    assert dict(parts.select(stream_time_before(before).alias("t")).dtypes) == {"t": "bigint"}
