"""A store's Delta checkpoints (changelog and intake), written beside the stream, not inside its commits.

Delta writes a table's checkpoint inside the commit whose version is a multiple of the table's
`delta.checkpointInterval` (10 by default): the micro-batch that lands on such a version rebuilds
the table's state and writes the checkpoint (seconds on a small machine) before it finishes, so one
batch in ten would be late by that much. A changelog and an intake table carry an interval no commit
reaches (NO_COMMIT_CHECKPOINTS), and their writers checkpoint them once `EVERY` commits have landed
since the newest checkpoint (maintenance/log_retention.py): a running store from its own thread
beside the stream (engine/run.py, with the audit copies) and when it stops; compaction and cleanup
after their commits. A one-off commit (a restore's cleanup, a migration's seed) leaves the
checkpoint to the next of those. Readers find a checkpoint every ten commits or so, as with Delta's
default; only who pays for it moved.

The checkpoint is written by Delta Kernel in the calling thread (jvm/src/io/deltastate/
KernelCheckpoint.java): Delta Spark's own checkpoint runs two Spark jobs that take the executors'
task slots from the stream's next batch (`deltastate bench freshness`: those batches were the
slowest tenth); Kernel's replay of the same log takes one driver thread for a fraction of that time.
Kernel does not carry the tombstones of the checkpoint it starts from (`_kernel_writes`), so a table
holding tombstones, and one Kernel refuses, is checkpointed by Delta Spark as before.

A checkpoint of version N written while the stream commits N+1 is safe: checkpoints describe one
version and Delta's readers pick the newest complete one.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

from py4j.protocol import Py4JJavaError

from deltastate.changelog.deltalog import commit_versions, complete_checkpoints, local_dir, v2_checkpoints

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)
_kernel_refused: set[str] = set()  # tables whose Kernel refusal was logged once

EVERY = 10  # commits between checkpoints: Delta's own default interval
INTERVAL_PROPERTY = "delta.checkpointInterval"
# The largest interval Delta accepts (an int): no commit version reaches a multiple of it.
NO_COMMIT_CHECKPOINTS = str(2**31 - 1)


def versions_behind(spark: SparkSession, path: str) -> tuple[int, int] | None:
    """(newest version, newest checkpointed version or -1); None when there is no table. A local
    table is read from its log folder's file names, other storage through Delta's log."""
    root = local_dir(path)
    if root is not None:
        folder = root / "_delta_log"
        try:
            names = os.listdir(folder)
        except FileNotFoundError:
            return None
        versions = commit_versions(names)
        if not versions:
            return None
        checkpointed = set(complete_checkpoints(folder, names)) | v2_checkpoints(names)
        return versions[-1], max(checkpointed, default=-1)
    snapshot = _delta_log(spark, path).update(False, _none(spark), _none(spark))
    if snapshot.version() < 0:
        return None
    return snapshot.version(), snapshot.checkpointProvider().version()


def checkpoint_if_due(spark: SparkSession, path: str, every: int = EVERY) -> int | None:
    """Checkpoints the table's newest version when `every` commits or more have landed since its
    newest checkpoint; returns the version checkpointed, None when none was due (or a concurrent
    writer's checkpoint of that version exists)."""
    found = versions_behind(spark, path)
    if found is None or found[0] - max(found[1], 0) < every:
        return None
    if _kernel_writes(path):
        try:
            written = spark._jvm.io.deltastate.KernelCheckpoint.write(spark._jsc.hadoopConfiguration(), path, found[0])
            return found[0] if written else None
        except Py4JJavaError as error:  # a table Kernel refuses to checkpoint (a CHECK constraint, ...)
            if path not in _kernel_refused:
                _kernel_refused.add(path)
                log.warning("Delta Kernel cannot checkpoint %s (%s); Delta Spark writes its checkpoints, as Spark jobs",
                            path, str(error.java_exception).splitlines()[0])
    delta_log = _delta_log(spark, path)
    snapshot = delta_log.update(False, _none(spark), _none(spark))
    delta_log.checkpoint(snapshot, _none(spark))
    return int(snapshot.version())


def _kernel_writes(path: str) -> bool:
    """Whether Kernel may write the table's next checkpoint: a local table whose newest checkpoint
    holds no tombstone. Kernel's checkpoint keeps the removes of the commits it replays, not those of
    the checkpoint it starts from, where Delta keeps a tombstone for the table's
    delta.deletedFileRetentionDuration so that VACUUM spares a recently removed file that older
    versions (time travel, a retained snapshot's version) still read. A table a compaction
    rewrote is checkpointed by Delta Spark until its tombstones have expired."""
    root = local_dir(path)
    if root is None:
        return False
    folder = root / "_delta_log"
    names = os.listdir(folder)
    if v2_checkpoints(names):
        return False
    checkpoints = complete_checkpoints(folder, names)
    if not checkpoints:
        return True
    return not any(_holds_removes(f) for f in checkpoints[max(checkpoints)])


def _holds_removes(checkpoint_file: Path) -> bool:
    import pyarrow.parquet as pq  # only a log with a checkpoint needs it

    if "remove" not in pq.read_schema(checkpoint_file).names:  # a writer may leave out an absent action
        return False
    removes = pq.read_table(checkpoint_file, columns=["remove"])
    return removes.column("remove").null_count < removes.num_rows


def checkpoint_quietly(spark: SparkSession, path: str) -> None:
    """checkpoint_if_due for work whose own outcome must not depend on it (a checkpoint only makes
    later reads faster): a failure is logged and the next due check tries again."""
    try:
        checkpoint_if_due(spark, path)
    except Exception:  # noqa: BLE001 - retried at the next check; the table is whole without it
        log.warning("writing a Delta checkpoint of %s failed; the next check retries", path, exc_info=True)


def _delta_log(spark: SparkSession, path: str):
    return spark._jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, path)


def _none(spark: SparkSession):
    return spark._jvm.scala.Option.empty()
