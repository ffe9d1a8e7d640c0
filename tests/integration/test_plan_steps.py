"""Steps built once per run (engine/common/steps.py) answer what PySpark's own calls answer, in one
py4j round trip where PySpark's pay one per column; the stream time lookup built as one SQL
expression answers what the literal map answered."""

from __future__ import annotations

import contextlib

import py4j.clientserver
import pytest
from pyspark.sql import functions as F

from deltastate.engine.common.steps import Aggregate, Join, Select
from deltastate.engine.windowed.stream_time import stream_time_before


@contextlib.contextmanager
def round_trips():
    """Counts the py4j commands this block sends to the JVM."""
    counted = {"n": 0}
    send = py4j.clientserver.ClientServerConnection.send_command

    def counting(self, command):
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


def test_steps_refuse_empty_column_lists(spark):
    with pytest.raises(ValueError, match="at least one column"):
        Select(spark, [])
    with pytest.raises(ValueError, match="at least one aggregation"):
        Aggregate(spark, ["g"], [])


@pytest.mark.parametrize("before", [{}, {0: 5, 3: 9_000_000_000_000}, {1: -4}])
def test_stream_time_before_reads_the_partitions_time(spark, before):
    parts = spark.createDataFrame([(p,) for p in range(5)], "partition int")
    got = {r["partition"]: r["t"] for r in parts.select("partition", stream_time_before(before).alias("t")).collect()}
    assert got == {p: before.get(p) for p in range(5)}
    assert dict(parts.select(stream_time_before(before).alias("t")).dtypes) == {"t": "bigint"}
