"""What a Delta log says about deltastate's idempotent appends, without opening a data file.

Every append of the stream is idempotent: txnAppId is the lineage's app id for the table and
txnVersion the micro-batch id, and Delta keeps each app id's newest version in the log. So "which
batch did this lineage write last" is a log lookup, whatever the length of the history, and only
that batch's rows need reading (their files are found by lineage_id/batch_id statistics).
"""

from __future__ import annotations

from delta.tables import DeltaTable
from pyspark.sql import Row, SparkSession
from pyspark.sql import functions as F

from deltastate.changelog.log_state import read_log_state

# Delta drops an idempotent writer's txn entry after this long when a table sets it; deltastate's
# tables do not, so the log keeps every lineage's newest batch for good.
TXN_RETENTION = "delta.setTransactionRetentionDuration"


def log_snapshot(spark: SparkSession, path: str):
    """The table's latest Delta snapshot (a JVM object), or None when there is no table."""
    if not DeltaTable.isDeltaTable(spark, path):
        return None
    return spark._jvm.org.apache.spark.sql.delta.DeltaLog.forTableWithSnapshot(spark._jsparkSession, path)._2()


def txn_versions(spark: SparkSession, path: str) -> dict[str, int] | None:
    """appId -> newest txnVersion of the table's idempotent appends, read from the Delta log (no data
    file is opened): {} for a missing table, None for one whose entries may expire. A local table's
    log is replayed in Python; Spark's snapshot answers the rest."""
    local = read_log_state(path)
    if local is not None:
        return None if TXN_RETENTION in local.configuration else dict(local.txns)
    snapshot = log_snapshot(spark, path)
    if snapshot is None:
        return {}
    if snapshot.metadata().configuration().contains(TXN_RETENTION):
        return None
    versions: dict[str, int] = {}
    transactions = snapshot.setTransactions().iterator()
    while transactions.hasNext():
        txn = transactions.next()
        versions[str(txn.appId())] = int(txn.version())
    return versions


def newest_batch(spark: SparkSession, path: str, app_id: str, lineage_id: str) -> int | None:
    """The newest batch a lineage appended to the table (where it resumes from): its txn version in
    the log, or, for a table whose txn entries may expire, the newest batch_id of its rows."""
    versions = txn_versions(spark, path)
    if versions is not None:
        return versions.get(app_id)
    row = (spark.read.format("delta").load(path).where(F.col("lineage_id") == lineage_id)
           .agg(F.max("batch_id")).first())
    return None if row is None or row[0] is None else int(row[0])


class UnknownFromLog(Exception):
    """The log cannot answer (expiring txn entries, a row missing or lacking a column): scan instead."""


def newest_lineage_row(spark: SparkSession, path: str, app_id: str, lineage_id: str,
                       columns: list[str]) -> tuple[int, Row] | None:
    """(batch id, row) of the newest batch the lineage appended to the table, reading that batch's
    row only; None when the lineage appended nothing. Raises UnknownFromLog when the log cannot tell
    or the row is not there as one row with every column asked for."""
    versions = txn_versions(spark, path)
    if versions is None:
        raise UnknownFromLog(f"{path} sets {TXN_RETENTION}")
    if app_id not in versions:
        return None
    batch_id = versions[app_id]
    table = spark.read.format("delta").load(path)
    missing = [c for c in columns if c not in table.columns]
    if missing:
        raise UnknownFromLog(f"{path} has no column(s) {missing}")
    rows = (table.where((F.col("lineage_id") == F.lit(lineage_id)) & (F.col("batch_id") == F.lit(batch_id)))
            .select(*columns).collect())
    if len(rows) != 1:
        raise UnknownFromLog(f"{path} holds {len(rows)} rows of lineage {lineage_id} batch {batch_id}")
    return batch_id, rows[0]
