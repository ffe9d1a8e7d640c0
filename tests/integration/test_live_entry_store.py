"""io.deltastate.LiveEntryStore through the real Spark session and its RocksDB state store: a batch
writes at version = its batch id and reads at the version its predecessor committed; a replayed batch
writes the same version again and changes nothing; an older version stays readable; a new run id
(a restarted process) reads the committed versions from the checkpoint folder."""

from __future__ import annotations

import uuid

import pytest
from pyspark.sql import DataFrame

pytestmark = pytest.mark.integration
COLUMNS = "key string, window_start long, window_end long, is_delete boolean, count long, total double"
PARTITIONS = 4


def _write(spark, folder: str, run: str, batch: int, rows: list[tuple]) -> int:
    df = spark.createDataFrame(rows, COLUMNS)
    return spark._jvm.io.deltastate.LiveEntryStore.write(df._jdf, folder, run, batch, PARTITIONS)


def _read(spark, folder: str, run: str, version: int, keys: list[str]) -> set[tuple]:
    values = spark.createDataFrame([], COLUMNS).select("count", "total").schema
    jvalues = spark._jsparkSession.parseDataType(values.json())
    asked = spark.createDataFrame([(k,) for k in keys], "key string")
    found = spark._jvm.io.deltastate.LiveEntryStore.read(asked._jdf, jvalues, folder, run, version, PARTITIONS)
    return {tuple(r) for r in DataFrame(found, spark).collect()}


def test_versions_follow_batches_and_a_replay_changes_nothing(spark, tmp_path):
    folder, run = str(tmp_path / "live"), str(uuid.uuid4())
    first = [("a", 0, 5, False, 1, 2.0), ("a", 5, 10, False, 3, 4.0), ("b", 0, 5, False, 7, 1.5)]
    second = [("a", 0, 5, True, None, None), ("b", 0, 5, False, 8, 3.0)]
    after_first = {r[:3] + r[4:] for r in first}
    after_second = {("a", 5, 10, 3, 4.0), ("b", 0, 5, 8, 3.0)}

    assert _write(spark, folder, run, 0, first) == 3
    assert _read(spark, folder, run, 1, ["a", "b", "c"]) == after_first
    assert _write(spark, folder, run, 1, second) == 2
    assert _read(spark, folder, run, 2, ["a", "b"]) == after_second
    assert _write(spark, folder, run, 1, second) == 2  # the replay of batch 1
    assert _read(spark, folder, run, 2, ["a", "b"]) == after_second
    assert _read(spark, folder, run, 1, ["a", "b"]) == after_first
    assert _read(spark, folder, str(uuid.uuid4()), 2, ["a", "b"]) == after_second
    assert _read(spark, folder, run, 2, ["b"]) == {("b", 0, 5, 8, 3.0)}
