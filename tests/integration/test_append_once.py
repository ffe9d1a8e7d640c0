"""Idempotent appends (changelog/tables.py append_once over io.deltastate.BatchAppend), through real
Spark and Delta: an (app id, version) lands once; the replay check reads the txn versions from the
snapshot's checksum, so an append runs only its write's job and a replay runs none; two transactions
of one app id conflict as Delta's own idempotent writes do; a frame with columns the table lacks goes
through Delta's writer, which merges them or names the mismatch."""

from pathlib import Path

import pytest
from delta.exceptions import ConcurrentTransactionException
from pyspark.errors import AnalysisException

from deltastate.changelog.tables import append_once
from deltastate.changelog.txn_log import TXN_RETENTION, txn_versions

pytestmark = pytest.mark.integration


def _table(spark, path: Path, properties: dict[str, str] | None = None) -> str:
    spark.createDataFrame([], "id bigint, name string").write.format("delta").save(str(path))
    for key, value in (properties or {}).items():
        spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('{key}' = '{value}')")
    return str(path)


def _rows(spark, version: int):
    return spark.createDataFrame([(version * 10 + i, f"v{version}") for i in range(3)], "id bigint, name string")


def _jobs_of(spark, group: str, run) -> tuple[object, list[str]]:
    """run() under a job group of its own; returns its result and the Spark jobs it ran."""
    sc = spark.sparkContext
    sc.setJobGroup(group, group)
    try:
        result = run()
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    tracker = sc.statusTracker()
    return result, [tracker.getJobInfo(j).jobId for j in tracker.getJobIdsForGroup(group)]


@pytest.mark.parametrize("expiring", [False, True], ids=["entries-kept", "entries-expire"])
def test_an_app_ids_versions_land_once(spark, tmp_path: Path, expiring: bool) -> None:
    path = _table(spark, tmp_path / "t", {TXN_RETENTION: "interval 7 days"} if expiring else None)
    landed = [append_once(_rows(spark, v), path, "app", v, metadata=f"m{v}") for v in (0, 1, 1, 0, 2)]
    assert landed == [True, True, False, False, True]
    found = sorted(tuple(r) for r in spark.read.format("delta").load(path).collect())
    assert found == sorted(tuple(r) for v in (0, 1, 2) for r in _rows(spark, v).collect())
    history = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").where("userMetadata IS NOT NULL").collect()
    assert sorted(r["userMetadata"] for r in history) == ["m0", "m1", "m2"]
    if not expiring:
        assert txn_versions(spark, path) == {"app": 2}


def test_the_replay_check_reads_the_checksum_not_the_table_state(spark, tmp_path: Path) -> None:
    path = _table(spark, tmp_path / "t")
    for version in range(3):
        append_once(_rows(spark, version), path, "app", version)
    # A replay runs no Spark job: Delta's own check rebuilds the table's state in one.
    landed, jobs = _jobs_of(spark, "replay", lambda: append_once(_rows(spark, 1), path, "app", 1))
    assert (landed, jobs) == (False, [])
    # An append runs its write's job alone.
    landed, jobs = _jobs_of(spark, "append", lambda: append_once(_rows(spark, 3), path, "app", 3))
    assert landed and len(jobs) == 1


def test_two_transactions_of_one_app_id_conflict(spark, tmp_path: Path) -> None:
    path = _table(spark, tmp_path / "t")
    append_once(_rows(spark, 0), path, "app", 0)
    appends = spark._jvm.io.deltastate.BatchAppend
    first, second = (appends.begin(spark._jsparkSession, path) for _ in range(2))
    assert [appends.txnVersion(t, "app") for t in (first, second)] == [0, 0]
    staged = [appends.write(t, _rows(spark, 1)._jdf, 0) for t in (first, second)]
    staged[0].commit("first", "app", 1)
    with pytest.raises(ConcurrentTransactionException):
        staged[1].commit("second", "app", 1)
    # A transaction that read the app id before an append_once landed the next version conflicts too.
    racing = appends.begin(spark._jsparkSession, path)
    appends.txnVersion(racing, "app")
    append_once(_rows(spark, 2), path, "app", 2)
    staged = appends.write(racing, _rows(spark, 2)._jdf, 0)
    with pytest.raises(ConcurrentTransactionException):
        staged.commit("late", "app", 2)
    assert txn_versions(spark, path) == {"app": 2}


def test_new_columns_merge_or_are_named(spark, tmp_path: Path) -> None:
    path = _table(spark, tmp_path / "t")
    wider = spark.createDataFrame([(1, "a", 7)], "id bigint, name string, extra int")
    with pytest.raises(AnalysisException, match="(?i)schema|extra"):
        append_once(wider, path, "app", 0)
    assert append_once(wider, path, "app", 0, merge_schema=True)
    assert not append_once(wider, path, "app", 0, merge_schema=True)
    assert [tuple(r) for r in spark.read.format("delta").load(path).collect()] == [(1, "a", 7)]
