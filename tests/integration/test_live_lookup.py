"""io.deltastate.LiveLookup through the real Spark session and its RocksDB state store: a join
appends each row's live entry (nulls when none is live, or when retention no longer holds it);
rows partitioned by key as the state is stay where they are, so the join, a merge over it and
LiveEntryStore.writeThrough run as one stage whose tasks write the state version the join read;
a join no write follows releases its store, so the version's write that comes later proceeds."""

from __future__ import annotations

import uuid

import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

pytestmark = pytest.mark.integration
STATE = "key string, window_start long, window_end long, is_delete boolean, count long, total double"
PARTITIONS = 4
KEYS = [chr(ord("a") + i) for i in range(10)]  # spread over the 4 partitions


def _write(spark, folder: str, run: str, version: int, rows: list[tuple]) -> None:
    df = spark.createDataFrame(rows, STATE)
    spark._jvm.io.deltastate.LiveEntryStore.write(df._jdf, folder, run, version, PARTITIONS, 0, 0)


def _join(spark, rows: DataFrame, folder: str, run: str, version: int, retained: int = 0,
          horizon: int = 0) -> DataFrame:
    values = spark._jsparkSession.parseDataType(spark.createDataFrame([], STATE).select("count", "total").schema.json())
    return DataFrame(spark._jvm.io.deltastate.LiveLookup.join(rows._jdf, values, "o_", folder, run, version,
                                                            PARTITIONS, retained, horizon), spark)


def _stages(spark, action) -> tuple[object, int]:
    """What action() returns, and how many stages the one Spark job it ran had."""
    sc, group = spark.sparkContext, f"lookup-{uuid.uuid4().hex}"
    sc.setJobGroup(group, "live lookup")
    try:
        result = action()
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    tracker = sc.statusTracker()
    jobs = tracker.getJobIdsForGroup(group)
    assert len(jobs) == 1, f"{len(jobs)} jobs"
    return result, len(tracker.getJobInfo(jobs[0]).stageIds)


def _state(spark, folder: str, run: str, version: int) -> set[tuple]:
    values = spark._jsparkSession.parseDataType(spark.createDataFrame([], STATE).select("count", "total").schema.json())
    asked = spark.createDataFrame([(k, None, None) for k in KEYS], "key string, window_start long, window_end long")
    found = spark._jvm.io.deltastate.LiveEntryStore.read(asked._jdf, values, folder, run, version, PARTITIONS)
    return {tuple(r) for r in DataFrame(found, spark).collect()}


def _seeded(spark, tmp_path) -> tuple[str, str, dict[tuple, tuple]]:
    """A state at version 1 with three windows of every key; returns its folder, run and entries."""
    folder, run = str(tmp_path / "live"), str(uuid.uuid4())
    rows = [(k, s, s + 5, False, i * 10 + s, float(i) + s / 10) for i, k in enumerate(KEYS) for s in (0, 5, 10)]
    _write(spark, folder, run, 0, rows)
    return folder, run, {r[:3]: (r[4], r[5]) for r in rows}


@pytest.mark.parametrize("retained,horizon", [(0, 0), (1, 5), (2, 10)])
def test_a_join_appends_each_rows_entry_or_nulls(spark, tmp_path, retained, horizon):
    """Each row keeps its columns and gains its entry's values; a window absent from the state, or
    past the horizon by its retained column (1 window_start, 2 window_end), gains nulls."""
    folder, run, entries = _seeded(spark, tmp_path)
    asked = [(k, s, s + 5, f"tag-{k}-{s}") for k in KEYS for s in (0, 5, 10, 15)]
    rows = spark.createDataFrame(asked, "key string, window_start long, window_end long, tag string")
    got = sorted(tuple(r) for r in _join(spark, rows, folder, run, 1, retained, horizon).collect())

    def expected(row: tuple) -> tuple:
        entry = entries.get(row[:3])
        if entry is None or (retained and row[retained] <= horizon):
            entry = (None, None)
        return (*row, *entry)

    assert got == sorted(expected(r) for r in asked)
    assert any(r[-1] is None for r in got) and any(r[-1] is not None for r in got)


def test_rows_keyed_as_the_state_stay_where_they_are(spark, tmp_path):
    """Rows hash-partitioned by their first column into the state's partitions are joined where
    they are (one shuffle: the keying); rows partitioned otherwise are shuffled to the state's
    partitions first and answer the same."""
    folder, run, entries = _seeded(spark, tmp_path)
    rows = spark.createDataFrame([(k, 5, 10, i) for i, k in enumerate(KEYS)],
                                 "key string, window_start long, window_end long, n long")
    want = sorted((k, 5, 10, i, *entries[(k, 5, 10)]) for i, k in enumerate(KEYS))
    keyed = _join(spark, rows.repartition(PARTITIONS, "key"), folder, run, 1)
    got, stages = _stages(spark, lambda: sorted(tuple(r) for r in keyed.collect()))
    assert (got, stages) == (want, 2)
    # Aggregated by the whole entry key: hash-partitioned by all three columns, not by the key.
    other = rows.groupBy("key", "window_start", "window_end").agg(F.max("n").alias("n"))
    got, stages = _stages(spark, lambda: sorted(tuple(r) for r in _join(spark, other, folder, run, 1).collect()))
    assert (got, stages) == (want, 3)


def _merge_through(spark, folder: str, run: str, version: int, partials: list[tuple]) -> DataFrame:
    """A batch's partials (key, bounds, count, total) keyed as the state, joined with their entries,
    merged (sums) and written through at version; returns the rows written (key, bounds, count)."""
    rows = spark.createDataFrame(partials, "key string, window_start long, window_end long, p_count long, p_total double")
    joined = _join(spark, rows.repartition(PARTITIONS, "key"), folder, run, version)
    merged = joined.select("key", "window_start", "window_end", F.lit(False).alias("is_delete"),
                           (F.coalesce("o_count", F.lit(0)) + F.col("p_count")).alias("count"),
                           (F.coalesce("o_total", F.lit(0.0)) + F.col("p_total")).alias("total"),
                           F.col("key").alias("out_key"), F.col("window_start").alias("out_start"),
                           (F.coalesce("o_count", F.lit(0)) + F.col("p_count")).alias("out_count"))
    return DataFrame(spark._jvm.io.deltastate.LiveEntryStore.writeThrough(merged._jdf, 2, folder, run, version,
                                                                        PARTITIONS, 0, 0), spark)


def test_a_join_merged_and_written_through_is_one_stage_after_the_keying(spark, tmp_path):
    """The join, the merge and the state write run in the tasks of one stage (the stage before it
    only keys the input); the version written holds the merged entries, a replay writes the same,
    and the next version's join reads them."""
    folder, run, entries = _seeded(spark, tmp_path)
    partials = [(k, s, s + 5, 2, 0.5) for k in KEYS[:6] for s in (5, 15)]
    through = _merge_through(spark, folder, run, 1, partials)
    written, stages = _stages(spark, lambda: sorted(tuple(r) for r in through.collect()))
    assert stages == 2

    reference = dict(entries)
    for k, s, e, c, t in partials:
        old = reference.get((k, s, e), (0, 0.0))
        reference[(k, s, e)] = (old[0] + c, old[1] + t)
    assert written == sorted((k, s, reference[(k, s, e)][0]) for k, s, e, _, _ in partials)
    want = {(*key, *value) for key, value in reference.items()}
    assert _state(spark, folder, run, 2) == want
    _merge_through(spark, folder, run, 1, partials).collect()  # the replay of the batch
    assert _state(spark, folder, run, 2) == want
    again = sorted(tuple(r) for r in _merge_through(spark, folder, run, 2, partials[:1]).collect())
    assert again == [(partials[0][0], partials[0][1], reference[partials[0][:3]][0] + 2)]


def test_a_join_no_write_follows_releases_its_store(spark, tmp_path):
    """A join whose rows are collected (no write in its tasks) releases the version it read: the
    version's write that follows proceeds, and the next version holds it."""
    folder, run, entries = _seeded(spark, tmp_path)
    rows = spark.createDataFrame([(k, 0, 5) for k in KEYS], "key string, window_start long, window_end long")
    assert len(_join(spark, rows.repartition(PARTITIONS, "key"), folder, run, 1).collect()) == len(KEYS)
    _write(spark, folder, run, 1, [("a", 20, 25, False, 1, 1.0)])
    assert _state(spark, folder, run, 2) == {(*k, *v) for k, v in entries.items()} | {("a", 20, 25, 1, 1.0)}


def _with_entries(spark, rows: DataFrame, folder: str, run: str, version: int, retained: int = 0,
                  horizon: int = 0) -> DataFrame:
    values = spark._jsparkSession.parseDataType(spark.createDataFrame([], STATE).select("count", "total").schema.json())
    return DataFrame(spark._jvm.io.deltastate.LiveLookup.withEntries(rows._jdf, values, folder, run, version, PARTITIONS,
                                                                   5, 0, retained, horizon), spark)


RECORDS = "key string, window_start long, window_end long, count long, total double, kind int, n long"


@pytest.mark.parametrize("retained,horizon", [(0, 0), (2, 10)])
def test_rows_gain_their_keys_entries_once(spark, tmp_path, retained, horizon):
    """Each row is handed on unchanged; each key the rows hold gains every entry the state keeps of
    it (kind 0, the rest null), once however many rows it has; retention hides what it would."""
    folder, run, entries = _seeded(spark, tmp_path)
    asked = [(k, None, None, None, None, 1, i) for i, k in enumerate(KEYS[:7] * 3)]
    got = sorted(_with_entries(spark, spark.createDataFrame(asked, RECORDS), folder, run, 1, retained, horizon)
                 .collect(), key=lambda r: (r[0], r[5], r[1] or 0, r[6] or 0))
    kept = [(k, s, e, c, t, 0, None) for (k, s, e), (c, t) in entries.items()
            if k in KEYS[:7] and not (retained and (s, e)[retained - 1] <= horizon)]
    assert [tuple(r) for r in got] == sorted([*asked, *kept], key=lambda r: (r[0], r[5], r[1] or 0, r[6] or 0))
    assert len(kept) < 21 if retained else len(kept) == 21
