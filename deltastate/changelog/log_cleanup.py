"""A store's Delta logs stay short: commits past the log retention leave, unless a reader needs them.

Every commit leaves files in the table's `_delta_log` (on a local disk four: the commit, Delta's
checksum, and Hadoop's checksum of each), a store committing once a second 345,600 a day, and Delta
lists that folder whenever it brings a snapshot up to date, on every commit: an append's cost grows
with the files the log keeps, even listed by name (jvm/src/io/deltastate/LocalLogStore.java), and the
folder grows without bound. Delta's own cleanup runs only after a checkpoint written inside a commit,
truncates its cutoff to the previous midnight and knows nothing of deltastate's readers; a changelog
never checkpoints inside a commit (changelog/checkpoints.py).

So a store's changelog and intake tables carry `delta.enableExpiredLogCleanup = false` (Delta never
deletes on its own) and deltastate's own `deltastate.logRetentionDuration` (an interval as Delta
writes them; DEFAULT_RETENTION when created, a value a user set is kept). It is not Delta's
`delta.logRetentionDuration`, which Delta refuses below `delta.deletedFileRetentionDuration` (seven
days, VACUUM's guard for writes in flight, which stays as it is). `clean_log` deletes the log files
older than the retention through Delta's own cleanup (jvm/src/io/deltastate/LogCleanup.java: the
cutoff truncated to the minute), never from the first commit a reader still needs on:
maintenance/log_retention.py says which commits those are and runs the cleanup beside a running
store's stream and after compaction and cleanup. Delta keeps a checkpoint from which every retained
version reads, so time travel reaches back as far as the retention (and those readers) kept commits.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

RETENTION_PROPERTY = "deltastate.logRetentionDuration"
SELF_CLEANUP_PROPERTY = "delta.enableExpiredLogCleanup"
# An hour of versions: at one commit a second ~14,400 files on a local disk, which an append does not
# feel (`deltastate bench commit --log-files 14800`); longer time travel: set the property on the table.
DEFAULT_RETENTION = "interval 1 hours"
_SLACK_MS = 60_000  # the JVM reads its clock after ours: the cutoff stays this far before a kept commit


def log_properties() -> dict[str, str]:
    """The properties a new changelog or intake table is created with."""
    return {RETENTION_PROPERTY: DEFAULT_RETENTION, SELF_CLEANUP_PROPERTY: "false"}


def missing_log_properties(properties: dict[str, str]) -> dict[str, str]:
    """What a table created without them lacks: Delta's own cleanup stays off, a retention already
    set (by a user) stays as it is."""
    wanted = log_properties()
    return {key: value for key, value in wanted.items()
            if properties.get(key) != value and (key != RETENTION_PROPERTY or key not in properties)}


def clean_log(spark: SparkSession, path: str, retention_ms: int, keep_from: int | None = None) -> None:
    """Deletes the table's log files older than retention_ms and older than commit `keep_from` (None:
    no bound), through Delta's cleanup; nothing when there is no table or no checkpoint, or when commit
    `keep_from` has left the log already."""
    jvm = spark._jvm
    delta_log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, path)
    none = jvm.scala.Option.empty()
    snapshot = delta_log.update(False, none, none)
    if snapshot.version() < 0:
        return
    if keep_from is not None and keep_from <= snapshot.version():
        kept_at = _commit_mtime_ms(spark, delta_log, keep_from)
        if kept_at is None:  # a reader needs a commit that has left the log: delete nothing more
            log.warning("%s: commit %d, which a reader still needs, is no longer in the log; its log is "
                        "not cleaned until that reader moves on (publish a snapshot)", path, keep_from)
            return
        retention_ms = max(retention_ms, int(time.time() * 1000) - kept_at + _SLACK_MS)
    jvm.io.deltastate.LogCleanup.cleanUpExpiredLogs(delta_log, snapshot, int(retention_ms))


def _commit_mtime_ms(spark: SparkSession, delta_log, version: int) -> int | None:
    """The modification time of commit `version`'s file (what Delta's cleanup compares with its
    cutoff); None when the file has left the log."""
    jvm = spark._jvm
    log_path = delta_log.logPath()
    commit = jvm.org.apache.hadoop.fs.Path(log_path, f"{version:020d}.json")
    fs = log_path.getFileSystem(spark._jsc.hadoopConfiguration())
    try:
        return int(fs.getFileStatus(commit).getModificationTime())
    except Exception as exc:  # noqa: BLE001 - py4j wraps the JVM's FileNotFoundException
        if "FileNotFoundException" in str(exc):
            return None
        raise


__all__ = ["DEFAULT_RETENTION", "RETENTION_PROPERTY", "SELF_CLEANUP_PROPERTY", "clean_log", "log_properties",
           "missing_log_properties"]
