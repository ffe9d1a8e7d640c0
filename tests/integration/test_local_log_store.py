"""Delta's local log store lists a log folder by name and stats only the files it returns (real Spark
and Delta): the same files, statuses and order as Delta's own HDFSLogStore, whatever else the folder
holds; a missing folder is the same FileNotFoundException Delta's table-exists checks rely on; and
the Spark sessions deltastate starts use it for file: tables."""

import os
from pathlib import Path

import pytest
from py4j.protocol import Py4JJavaError

pytestmark = pytest.mark.integration


def _listing(store, spark, path: str) -> list[tuple[str, int, int, bool]]:
    jvm = spark._jvm
    conf = spark._jsc.hadoopConfiguration()
    found = store.listFrom(jvm.org.apache.hadoop.fs.Path(path), conf)
    out = []
    while found.hasNext():
        status = found.next()
        out.append((status.getPath().toString(), status.getLen(), status.getModificationTime(), status.isDirectory()))
    return out


def _stores(spark):
    conf = spark._jsc.hadoopConfiguration()
    return spark._jvm.io.deltastate.LocalLogStore(conf), spark._jvm.io.delta.storage.HDFSLogStore(conf)


def test_the_listing_equals_delta_own_for_every_starting_name(spark, tmp_path: Path) -> None:
    table = str(tmp_path / "table")
    for i in range(12):
        spark.range(i, i + 2).write.format("delta").mode("append").save(table)
    log = Path(table) / "_delta_log"
    for i in range(200):  # names before, between and after the commits', and Hadoop checksum sidecars
        (log / f"-before-{i:04d}").touch()
        (log / f"zz-after-{i:04d}").touch()
    (log / ".00000000000000000003.json.crc.extra").touch()
    os.utime(log / f"{5:020d}.json", (1_700_000_000, 1_700_000_000))
    ours, delta = _stores(spark)
    for start in (f"{0:020d}", f"{5:020d}", f"{11:020d}", f"{12:020d}", "zz-after-0100", "-before-0150", ""):
        path = str(log / start) if start else str(log) + "/"
        expected = _listing(delta, spark, f"file:{path}")
        assert _listing(ours, spark, f"file:{path}") == expected, start
        assert expected, start
    names = [Path(p).name for p, *_ in _listing(ours, spark, f"file:{log}/{5:020d}")]
    assert names[:2] == [f"{5:020d}.crc", f"{5:020d}.json"]
    assert not any(n.startswith("-before") or (n.startswith(".") and n.endswith(".crc")) for n in names)


def test_a_missing_log_folder_is_not_found(spark, tmp_path: Path) -> None:
    ours, _ = _stores(spark)
    with pytest.raises(Py4JJavaError, match="FileNotFoundException"):
        _listing(ours, spark, f"file:{tmp_path}/none/_delta_log/{0:020d}")


def test_deltastate_sessions_use_it_for_local_tables(spark, tmp_path: Path) -> None:
    assert spark.conf.get("spark.delta.logStore.file.impl") == "io.deltastate.LocalLogStore"
    table = str(tmp_path / "table")
    spark.range(3).write.format("delta").save(table)
    jvm = spark._jvm
    log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, table)
    used = log.store().getDelegate(jvm.org.apache.hadoop.fs.Path(f"file:{table}")).logStoreImpl()
    assert used.getClass().getName() == "io.deltastate.LocalLogStore"
