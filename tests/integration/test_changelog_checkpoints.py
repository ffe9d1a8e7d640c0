"""A store's Delta checkpoints are written by its writers beside their commits, not inside them
(real Spark and Delta): a changelog's commits never checkpoint by themselves, a due check writes one
of the newest version (by Delta Kernel, without a Spark job) that Delta Spark and the plain-Python log
readers then read from, and a changelog or intake table created without the interval gets it at the
next start."""

from pathlib import Path

import pytest
from pyspark.sql import functions as F

from deltastate.changelog.checkpoints import (
    INTERVAL_PROPERTY,
    NO_COMMIT_CHECKPOINTS,
    checkpoint_if_due,
    versions_behind,
)
from deltastate.changelog.layout import CHANGELOG, INTAKE
from deltastate.changelog.log_state import read_log_state
from deltastate.changelog.tables import ensure_tables
from deltastate.stores import load_store

pytestmark = pytest.mark.integration


def _append(spark, path: str, first: int) -> None:
    spark.range(first, first + 3).selectExpr("id", "id % 5 AS k").write.format("delta").mode("append").save(path)


def _table_of_appends(spark, path: str, commits: int) -> None:
    """A table of `commits` 3-row appends (ids i*10 .. i*10+2) that Delta never checkpoints itself."""
    _append(spark, path, 0)
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('{INTERVAL_PROPERTY}' = '{NO_COMMIT_CHECKPOINTS}')")
    for i in range(1, commits):
        _append(spark, path, i * 10)


def _checkpoint_files(path: str) -> list[str]:
    return sorted(p.name for p in (Path(path) / "_delta_log").glob("*.checkpoint*.parquet"))


def test_commits_write_no_checkpoint_and_a_due_check_writes_the_newest(spark, tmp_path: Path) -> None:
    path = str(tmp_path / "table")
    _table_of_appends(spark, path, 9)
    assert versions_behind(spark, path) == (9, -1)
    assert checkpoint_if_due(spark, path) is None  # 9 commits since none: not due yet
    for i in range(9, 13):
        _append(spark, path, i * 10)
    assert _checkpoint_files(path) == [], "a commit wrote a checkpoint (Delta's interval should never fire)"
    spark.sparkContext.setJobGroup("checkpoint-13", "a due checkpoint")
    try:
        assert checkpoint_if_due(spark, path) == 13
    finally:
        spark.sparkContext.setJobGroup("", "")
    assert spark.sparkContext.statusTracker().getJobIdsForGroup("checkpoint-13") == [], \
        "writing the checkpoint ran a Spark job: it would take the task slots of the stream's next batch"
    assert _checkpoint_files(path) == [f"{13:020d}.checkpoint.parquet"]
    assert versions_behind(spark, path) == (13, 13)
    assert checkpoint_if_due(spark, path) is None
    _append(spark, path, 500)
    # Delta reads the table from the checkpoint plus the newer commit; the plain-Python log replay
    # reads the same files.
    expected = sorted(list(range(0, 3)) + [i * 10 + j for i in range(1, 13) for j in range(3)] + [500, 501, 502])
    assert sorted(r["id"] for r in spark.read.format("delta").load(path).select("id").collect()) == expected
    assert len(read_log_state(path, with_files=True).files) == len(spark.read.format("delta").load(path).inputFiles())
    assert checkpoint_if_due(spark, path, every=1) == 14
    assert checkpoint_if_due(spark, path, every=0) is None  # the checkpoint of 14 exists already


def test_a_checkpoint_after_removes_reads_as_delta_reads_the_table(spark, tmp_path: Path) -> None:
    """Removed files (a delete, an overwrite) stay out of the checkpoint's live files for every reader."""
    path = str(tmp_path / "table")
    _table_of_appends(spark, path, 6)
    spark.sql(f"DELETE FROM delta.`{path}` WHERE k = 0")
    spark.read.format("delta").load(path).where("id < 30").write.format("delta").mode("overwrite").save(path)
    _append(spark, path, 70)
    newest = versions_behind(spark, path)[0]
    assert checkpoint_if_due(spark, path, every=1) == newest
    expected = sorted(r["id"] for r in spark.read.format("delta").load(path).select("id").collect())
    assert expected == sorted([i for i in range(0, 30) if i % 10 < 3 and i % 5 != 0] + [70, 71, 72])
    spark._jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()  # Delta reads the new checkpoint afresh
    assert sorted(r["id"] for r in spark.read.format("delta").load(path).select("id").collect()) == expected
    files = {Path(p).name for p in spark.read.format("delta").load(path).inputFiles()}
    assert {Path(p).name for p in read_log_state(path, with_files=True).files} == files
    # The removed files' tombstones outlive the next checkpoint too: VACUUM spares a file removed
    # within delta.deletedFileRetentionDuration only while a tombstone names it.
    tombstones = _tombstones(path, newest)
    assert tombstones, "the checkpoint holds no tombstone of the deleted and overwritten files"
    _append(spark, path, 80)
    assert checkpoint_if_due(spark, path, every=1) == newest + 1
    assert _tombstones(path, newest + 1) == tombstones
    assert sorted(r["id"] for r in spark.read.format("delta").load(path).select("id").collect()) == \
        sorted([*expected, 80, 81, 82])


def test_a_table_kernel_refuses_is_checkpointed_by_delta_spark(spark, tmp_path: Path) -> None:
    """Kernel does not checkpoint a table with a CHECK constraint; Delta Spark writes it instead."""
    path = str(tmp_path / "table")
    _table_of_appends(spark, path, 3)
    spark.sql(f"ALTER TABLE delta.`{path}` ADD CONSTRAINT non_negative CHECK (id >= 0)")
    _append(spark, path, 30)
    newest = versions_behind(spark, path)[0]
    assert checkpoint_if_due(spark, path, every=1) == newest
    assert _checkpoint_files(path) == [f"{newest:020d}.checkpoint.parquet"]
    spark._jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()
    assert spark.read.format("delta").load(path).count() == 12


def _tombstones(path: str, version: int) -> set[str]:
    """The paths of the remove actions in the table's checkpoint of `version`."""
    import pyarrow.parquet as pq

    removes = pq.read_table(Path(path) / "_delta_log" / f"{version:020d}.checkpoint.parquet", columns=["remove"])
    return {r["path"] for r in removes.column("remove").to_pylist() if r is not None}


@pytest.mark.parametrize("table", [CHANGELOG, INTAKE])
def test_a_table_without_the_interval_gets_it_at_the_next_start(spark, make_settings, table: str) -> None:
    settings = make_settings()
    store = load_store(settings, "player_stats")
    path = settings.table_path(store.storage, table)
    ensure_tables(spark, settings, store)
    assert read_log_state(path).configuration[INTERVAL_PROPERTY] == NO_COMMIT_CHECKPOINTS
    created = versions_behind(spark, path)[0]
    spark.sql(f"ALTER TABLE delta.`{path}` UNSET TBLPROPERTIES ('{INTERVAL_PROPERTY}')")  # as an older table
    assert INTERVAL_PROPERTY not in read_log_state(path).configuration
    ensure_tables(spark, settings, store)
    assert read_log_state(path).configuration[INTERVAL_PROPERTY] == NO_COMMIT_CHECKPOINTS
    assert versions_behind(spark, path)[0] == created + 2  # the unset, then one commit that sets it
    ensure_tables(spark, settings, store)
    assert versions_behind(spark, path)[0] == created + 2  # nothing missing: no commit
    assert spark.read.format("delta").load(path).where(F.lit(True)).count() == 0
