"""The Spark session deltastate runs on: local jars only (never an Ivy download), Delta's SQL
extension and catalog, the RocksDB state store provider, and deltastate's JVM functions."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from deltastate.config import Settings
from deltastate.infra.class_archive import archive_options
from deltastate.infra.jars import ensure_jars, spark_jars
from deltastate.infra.udaf import udaf_jar
from deltastate.stores.state import DEFAULT_STATE

LOG4J_FILE = Path(__file__).with_name("spark-log4j2.properties")


def driver_jars(settings: Settings) -> list[str]:
    """The jars Spark needs beyond its own (Kafka source, Delta, deltastate's functions), as real
    paths: every home names them the same way, which the class archive's classpath check needs."""
    ensure_jars(settings, ("spark-kafka", "delta"))
    return [str(Path(jar).resolve()) for jar in (*spark_jars(settings), udaf_jar(settings))]


def spark_conf(settings: Settings, app_name: str) -> dict[str, str]:
    jars = driver_jars(settings)
    conf = {
        "spark.app.name": app_name,
        "spark.master": settings.spark_master,
        # On the driver's classpath, where the JVM's class archive can serve their classes (a local
        # Spark's executors share the driver's JVM); spark.jars ships them to a cluster's executors.
        "spark.driver.extraClassPath": os.pathsep.join(jars),
        "spark.jars": ",".join(jars),
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.sql.shuffle.partitions": str(settings.shuffle_partitions),
        # Session defaults for stateful work outside a store's query; a store's query starts with
        # its own `state:` settings (stores/state.py).
        **{key: value for key, value in DEFAULT_STATE.spark_conf().items() if value is not None},
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.memory": os.environ.get("DELTASTATE_DRIVER_MEMORY", "4g"),
        # A deep stack: the stream execution thread overflowed in java.util.regex under load. The
        # log4j file sends Spark's log to stderr (log4j's own default would print it on stdout).
        "spark.driver.extraJavaOptions": " ".join(
            ["-Xss64m", f"-Dlog4j2.configurationFile={LOG4J_FILE}", *archive_options(settings, jars),
             *os.environ.get("DELTASTATE_DRIVER_JAVA_OPTS", "").split()]),
        "spark.sql.warehouse.dir": str(settings.home / "spark-warehouse"),
        "spark.databricks.delta.schema.autoMerge.enabled": "false",
        # Delta lists a table's _delta_log on every commit; Hadoop's local listing stats every file
        # of the folder, this store only the files from the asked version on (jvm/src, LocalLogStore).
        "spark.delta.logStore.file.impl": "io.deltastate.LocalLogStore",
        # The same listing for Delta Kernel, which writes the checkpoints (changelog/checkpoints.py).
        "spark.hadoop.io.delta.kernel.logStore.file.impl": "io.deltastate.LocalLogStore",
        # Hadoop's local file system runs `chmod` and `readlink` as processes without its native
        # library: several forks of this JVM per micro-batch (jvm/src, JavaLocalFileSystem).
        "spark.hadoop.fs.file.impl": "io.deltastate.JavaLocalFileSystem",
        "spark.hadoop.fs.AbstractFileSystem.file.impl": "io.deltastate.JavaLocalFs",
        "spark.sql.adaptive.enabled": "false",
        # Delta rebuilds a table's snapshot with this many tasks (default 50): on a few cores and
        # logs of a few thousand actions, 50 tasks cost more than the replay itself.
        "spark.databricks.delta.snapshotPartitions": str(settings.shuffle_partitions),
        # Delta's VACUUM lists a table's files with this many tasks, and Spark's default (10,000) is
        # sized for clusters: on a few cores a VACUUM of a small table spends its time scheduling tasks.
        "spark.sql.sources.parallelPartitionDiscovery.parallelism": str(4 * settings.shuffle_partitions),
        # Window functions buffer a partition's rows; past 4,096 rows (the default) the buffer goes
        # through a spillable sorter, which costs more than the window itself over large partitions.
        # The in-memory buffer is not tracked by Spark's memory manager, and compaction's
        # per-segment window reads full changelog rows, so the bound stays at 128k rows per task.
        "spark.sql.windowExec.buffer.in.memory.threshold": "131072",
        # Compiled code is cached by its source; a window or session store's batch, with the Delta
        # reads and commit around it, generates more than the default 100 classes, so with the
        # default every batch evicted its own classes and compiled them all again (about 130 Janino
        # compiles, 1.5-2 s of a driver core, per batch). A process that runs several stores needs
        # room for each one's.
        "spark.sql.codegen.cache.maxEntries": "1000",
        # PySpark can record the Python call site of every Column and DataFrame call for its error
        # messages: a walk of the Python stack and several py4j round trips each (about 1.5 ms per
        # call against 0.15 ms without). It decides once per process, at the first such call, and
        # defaults to on when a session is active then; a window or session batch builds its plan
        # from a few hundred calls. deltastate's errors name the store and the batch themselves.
        "spark.python.sql.dataFrameDebugging.enabled": "false",
    }
    conf.update(settings.extra_spark_conf)
    return conf


def get_spark(settings: Settings, app_name: str = "deltastate"):
    """The process's Spark session, created on first use with deltastate's configuration."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder
    for key, value in spark_conf(settings, app_name).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("DELTASTATE_SPARK_LOG_LEVEL", "ERROR"))
    return spark
