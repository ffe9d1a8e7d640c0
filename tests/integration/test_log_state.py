"""The plain-Python replay of a local Delta log (table properties, idempotent writers' txn versions,
live files with their statistics, the newest commit's time) against Spark's own snapshot of the same table: after a
single-file checkpoint, after a multi-part checkpoint, with files removed by an overwrite."""

from pathlib import Path

import pytest
from pyspark.sql import functions as F

from deltastate.changelog.log_state import column_max, file_column_range, read_log_state
from deltastate.changelog.reader import latest_commit
from deltastate.changelog.txn_log import TXN_RETENTION, txn_versions

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]


def _spark_snapshot(spark, path: str):
    return spark._jvm.org.apache.spark.sql.delta.DeltaLog.forTableWithSnapshot(spark._jsparkSession, path)._2()


def _spark_facts(spark, path: str) -> tuple[int, dict[str, str], dict[str, int], set[str]]:
    snapshot = _spark_snapshot(spark, path)
    conf = snapshot.metadata().configuration()
    configuration = {k: conf.apply(k) for k in _scala_keys(conf)}
    txns, it = {}, snapshot.setTransactions().iterator()
    while it.hasNext():
        txn = it.next()
        txns[str(txn.appId())] = int(txn.version())
    root = Path(path).resolve().as_uri().removeprefix("file://")
    files = {f.removeprefix("file:").removeprefix("//").removeprefix(root + "/")
             for f in spark.read.format("delta").load(path).inputFiles()}
    return int(snapshot.version()), configuration, txns, files


def _scala_keys(scala_map) -> list[str]:
    keys, it = [], scala_map.keysIterator()
    while it.hasNext():
        keys.append(str(it.next()))
    return keys


def _append(spark, path: str, start: int, app_id: str | None = None, version: int | None = None) -> None:
    frame = spark.range(start, start + 5).selectExpr("id", "id % 3 AS part", "concat('lineage-', id % 2) AS who")
    writer = frame.write.format("delta").mode("append").partitionBy("part")
    if app_id is not None:
        writer = writer.option("txnAppId", app_id).option("txnVersion", version)
    writer.save(path)


def _agrees(spark, path: str) -> None:
    version, configuration, txns, files = _spark_facts(spark, path)
    local = read_log_state(path, with_files=True)
    assert local is not None and local.version == version
    assert local.configuration == configuration
    assert local.txns == txns
    assert set(local.files) == files
    # Each file's lineage bounds equal its rows' own min and max (short strings: not truncated).
    bounds = {r["file"].rsplit("/", 1)[-1]: (r["low"], r["high"], False) for r in
              spark.read.format("delta").load(path).groupBy(F.input_file_name().alias("file"))
              .agg(F.min("who").alias("low"), F.max("who").alias("high")).collect()}
    assert {name.rsplit("/", 1)[-1]: file_column_range(add, "who") for name, add in local.files.items()} == bounds
    # The newest commit (publish's version and commit time) equals Delta's own history through Spark.
    [row] = (spark.sql(f"DESCRIBE HISTORY delta.`{path}` LIMIT 1")
             .select("version", F.unix_millis("timestamp").alias("ms")).collect())
    newest = latest_commit(spark, path)
    assert newest is not None and (newest[0], round(newest[1].timestamp() * 1000)) == (row["version"], row["ms"])
    newest_id = spark.read.format("delta").load(path).agg(F.max("id")).first()[0]
    assert column_max(path, "id") == (True, newest_id)
    assert column_max(path, "who") == (False, None)  # string statistics are truncated prefixes


def test_replay_agrees_with_sparks_snapshot(spark, tmp_path: Path) -> None:
    path = str(tmp_path / "table")
    assert read_log_state(path).absent and txn_versions(spark, path) == {}
    _append(spark, path, 0, "app-a", 0)
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.checkpointInterval' = '4', "
              "'deltastate.test' = 'one')")
    for batch in range(1, 4):
        _append(spark, path, batch * 10, "app-a", batch)
        _append(spark, path, batch * 10 + 5, "app-b" if batch % 2 else None, batch // 2)
    log = tmp_path / "table" / "_delta_log"
    assert (log / f"{4:020d}.checkpoint.parquet").is_file()
    _agrees(spark, path)  # version 7: the single-file checkpoint at 4, then JSON commits

    spark.conf.set("spark.databricks.delta.checkpoint.partSize", "3")
    try:
        spark.range(0, 4).selectExpr("id", "id % 3 AS part", "'lineage-x' AS who").write.format("delta") \
            .mode("overwrite").partitionBy("part").save(path)  # removes every earlier file
        for batch in range(4, 6):
            _append(spark, path, batch * 10, "app-a", batch)
    finally:
        spark.conf.unset("spark.databricks.delta.checkpoint.partSize")
    assert len(list(log.glob(f"{8:020d}.checkpoint.*.*.parquet"))) > 1, "a multi-part checkpoint at version 8"
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('{TXN_RETENTION}' = 'interval 30 days')")
    _agrees(spark, path)  # version 10: the multi-part checkpoint at 8, then JSON commits
    assert txn_versions(spark, path) is None  # entries that may expire are not an answer
