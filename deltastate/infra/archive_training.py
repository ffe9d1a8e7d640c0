"""The workload whose loaded classes become the JVM class archive (infra/class_archive.py).

Run as `python -m deltastate.infra.archive_training WORK_DIR` in a JVM told to dump its classes at
exit. It touches what a store's process touches, at toy sizes and without a broker: Delta tables
created, appended to idempotently with commit metadata, read, described and checkpointed; a
stateful aggregation on the RocksDB state store written by foreachBatch; an event-time window.
Classes it misses still load from their jars as usual.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from deltastate.config import load_settings
from deltastate.infra.spark import get_spark

_EVENTS = "key string, score long, ts timestamp"


def _write_events(folder: Path, batch: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"key": f"k{i % 7}", "score": i, "ts": f"2026-01-01T00:{i % 60:02d}:00Z"})
             for i in range(batch * 20, batch * 20 + 20)]
    (folder / f"events-{batch}.json").write_text("\n".join(lines) + "\n")


def train(work: Path) -> None:
    from delta.tables import DeltaTable

    settings = load_settings()
    spark = get_spark(settings, "deltastate-class-archive")
    table = str(work / "changelog")
    (DeltaTable.createIfNotExists(spark).location(table).addColumn("key", "STRING").addColumn("total", "BIGINT")
     .addColumn("bucket", "INT").partitionedBy("bucket").property("delta.checkpointInterval", "2").execute())
    DeltaTable.forPath(spark, table).detail().first()

    def write(batch: DataFrame, batch_id: int) -> None:
        rows = batch.persist()
        rows.groupBy().agg(F.count_if(F.col("total") > 0), F.max("total")).collect()
        (rows.select("key", "total", F.lit(0).alias("bucket")).write.format("delta").mode("append")
         .option("txnAppId", "training").option("txnVersion", batch_id)
         .option("userMetadata", json.dumps({"batch": batch_id})).save(table))
        rows.unpersist()

    events = work / "events"
    for batch in range(3):  # a commit per file: past the table's checkpoint interval
        _write_events(events, batch)
    stream = spark.readStream.schema(_EVENTS).option("maxFilesPerTrigger", 1).json(str(events))
    totals = stream.groupBy("key").agg(F.sum("score").alias("total"), F.max("ts").alias("newest"))
    (totals.writeStream.outputMode("update").foreachBatch(write)
     .option("checkpointLocation", str(work / "checkpoint")).trigger(availableNow=True).start()
     .awaitTermination())
    windows = (spark.readStream.schema(_EVENTS).json(str(events)).withWatermark("ts", "1 minute")
               .groupBy("key", F.window("ts", "5 minutes")).agg(F.count("*").alias("n")))
    (windows.writeStream.outputMode("append").format("delta").option("checkpointLocation", str(work / "w-check"))
     .trigger(availableNow=True).start(str(work / "windows")).awaitTermination())
    history = DeltaTable.forPath(spark, table).history(5).select("version", "userMetadata").collect()
    assert history, "the training table has no history"
    spark.read.format("delta").load(table).where("total > 0").groupBy("key").count().collect()
    _stop_and_wait(spark)


def _stop_and_wait(spark) -> None:
    """Stops Spark and waits for its JVM to exit: the JVM writes the archive while it exits, after
    this Python process would otherwise be gone. Closing the gateway's stdin is what makes the
    JVM exit (pyspark/java_gateway.py)."""
    jvm = spark.sparkContext._gateway.proc
    spark.stop()
    jvm.stdin.close()
    jvm.wait(timeout=600)


if __name__ == "__main__":
    train(Path(sys.argv[1]))
