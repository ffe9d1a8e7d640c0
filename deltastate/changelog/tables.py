"""Creating a store's Delta tables and appending to them exactly once.

`append_once` is Delta's idempotent write (txnAppId = the writer's lineage, txnVersion = its batch
or version): an append repeated after a crash finds its version in the table's log and is skipped.
It commits through io.deltastate.BatchAppend, which reads the version from the snapshot's checksum
file, where Delta's writer option rebuilds the table's state (a Spark job, about a second) on every
append. Cleanup's tombstones, a migration's seed and the intake's audit copies append so; a running
store's batches follow the rule in changelog/batch_commit.py (only a run's first batch can be a
replay).
"""

from __future__ import annotations

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession

from deltastate.changelog.checkpoints import INTERVAL_PROPERTY, NO_COMMIT_CHECKPOINTS
from deltastate.changelog.deltalog import local_dir, newest_version
from deltastate.changelog.layout import (
    CHANGELOG,
    DEADLETTER,
    DEADLETTER_COLUMNS,
    INTAKE,
    INTAKE_COLUMNS,
    SEGMENT,
    changelog_columns,
)
from deltastate.changelog.log_cleanup import log_properties, missing_log_properties
from deltastate.changelog.log_state import read_log_state
from deltastate.config import Settings
from deltastate.errors import StoreDefinitionError
from deltastate.stores import compat
from deltastate.stores.definition import StoreDefinition


def _create(spark: SparkSession, path: str, columns, partition_by: str | None, comment: str,
            properties: dict[str, str] | None = None) -> None:
    if local_dir(path) is not None and table_exists(spark, path):
        return  # an existing local table: nothing to create, and no Spark job to find that out
    builder = DeltaTable.createIfNotExists(spark).location(path).comment(comment)
    for name, type_ in columns:
        builder = builder.addColumn(name, type_)
    if partition_by:
        builder = builder.partitionedBy(partition_by)
    for key, value in (properties or {}).items():
        builder = builder.property(key, value)
    builder.execute()


def ensure_tables(spark: SparkSession, settings: Settings, store: StoreDefinition) -> None:
    """Creates the store's tables if missing; refuses a definition the existing ones contradict."""
    changelog = settings.table_path(store.storage, CHANGELOG)
    # A new changelog records its definition, its checkpoint interval (changelog/checkpoints.py) and
    # its log properties (changelog/log_cleanup.py) in the creating commit; check_definition adds them
    # to a table that lacks them, as the intake's interval and log properties are added to an intake table.
    _create(spark, changelog, changelog_columns(store), SEGMENT, f"deltastate changelog of store {store.name}",
            _changelog_properties(store))
    check_definition(spark, changelog, store)
    _create(spark, settings.table_path(store.storage, DEADLETTER), DEADLETTER_COLUMNS, None,
            f"deltastate dead letters of store {store.name}")
    intake = settings.table_path(store.storage, INTAKE)
    _create(spark, intake, INTAKE_COLUMNS, None, f"deltastate intake audit of store {store.name}",
            {INTERVAL_PROPERTY: NO_COMMIT_CHECKPOINTS, **log_properties()})
    properties = table_properties(spark, intake)
    _add_missing(spark, intake, {**_missing_checkpoint_interval(properties), **missing_log_properties(properties)})


def append_once(df: DataFrame, path: str, app_id: str, batch_id: int, merge_schema: bool = False,
                metadata: str | None = None, max_records_per_file: int = 0) -> bool:
    """Appends df, with metadata as the commit's userMetadata, unless the table holds (app_id,
    batch_id) already; returns whether it appended. A concurrent append of the same app id fails
    with Delta's ConcurrentTransactionException, as the writer option's does. merge_schema: df may
    bring columns a table created by an earlier deltastate lacks (Delta's writer adds them; older
    rows read null). max_records_per_file: 0 for no limit."""
    jvm = df.sparkSession._jvm
    txn = jvm.io.deltastate.BatchAppend.begin(df.sparkSession._jsparkSession, path)
    if jvm.io.deltastate.BatchAppend.txnVersion(txn, app_id) >= batch_id:
        return False
    if not jvm.io.deltastate.BatchAppend.fitsTable(txn, df._jdf):
        # Delta's own writer merges the new columns (merge_schema) or names the mismatch.
        writer = df.write.format("delta").mode("append").option("txnAppId", app_id).option("txnVersion", batch_id)
        if merge_schema:
            writer = writer.option("mergeSchema", "true")
        if metadata is not None:
            writer = writer.option("userMetadata", metadata)
        writer.save(path)
        return True
    jvm.io.deltastate.BatchAppend.write(txn, df._jdf, max_records_per_file).commit(metadata, app_id, batch_id)
    return True


def sql_string_literal(text: str) -> str:
    """text as a Spark SQL string literal: the parser unescapes backslashes, so they are escaped too."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def table_exists(spark: SparkSession, path: str) -> bool:
    """Whether a Delta table is at path: a local one by its log's commit files, others through Spark."""
    if local_dir(path) is not None:
        return newest_version(path) is not None
    return DeltaTable.isDeltaTable(spark, path)


def _changelog_properties(store: StoreDefinition) -> dict[str, str]:
    return {compat.PROPERTY: compat.encode(store), INTERVAL_PROPERTY: NO_COMMIT_CHECKPOINTS, **log_properties()}


def table_properties(spark: SparkSession, path: str) -> dict[str, str]:
    """The table's properties: a local table's from its log, others through Spark."""
    local = read_log_state(path)
    if local is not None and not local.absent:
        return local.configuration
    return DeltaTable.forPath(spark, path).detail().first()["properties"] or {}


def _add_missing(spark: SparkSession, path: str, missing: dict[str, str]) -> None:
    """Sets the table properties a table created by an earlier deltastate lacks, in one commit."""
    if missing:
        assignments = ", ".join(f"{sql_string_literal(k)} = {sql_string_literal(v)}" for k, v in missing.items())
        spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ({assignments})")


def check_definition(spark: SparkSession, changelog_path: str, store: StoreDefinition) -> None:
    """The changelog records the definition that wrote it (a table property); a run whose definition
    changes what the state means is refused before its first batch, naming what changed. A table
    created without the definition, the checkpoint interval or the log properties
    (changelog/log_cleanup.py) gets the missing ones, in one commit."""
    import json

    properties = table_properties(spark, changelog_path)
    recorded = properties.get(compat.PROPERTY)
    changes = [] if recorded is None else compat.differences(json.loads(recorded), compat.fingerprint(store))
    if changes:
        raise StoreDefinitionError(
            store.name, "the definition changed in a way its existing changelog and checkpoint cannot follow: "
            + "; ".join(changes) + ". Restore the previous definition, or declare the new one as a new store "
            "(a new name) and migrate to it")
    missing = _missing_checkpoint_interval(properties)
    if recorded is None:  # the recorded definition stays the one that created the table
        missing[compat.PROPERTY] = compat.encode(store)
    _add_missing(spark, changelog_path, {**missing, **missing_log_properties(properties)})


def _missing_checkpoint_interval(properties: dict[str, str]) -> dict[str, str]:
    """The interval no commit reaches (changelog/checkpoints.py), when a table created by an earlier
    deltastate lacks it: Delta would otherwise checkpoint inside every tenth commit."""
    return {} if properties.get(INTERVAL_PROPERTY) == NO_COMMIT_CHECKPOINTS else {INTERVAL_PROPERTY: NO_COMMIT_CHECKPOINTS}
