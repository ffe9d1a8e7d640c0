"""Column layout of a store's Delta tables. Everything that reads or writes them uses these names.

changelog   one row per changed store key per micro-batch; the latest row per key, ordered by
            (epoch, batch_id), is the store's state; op = 'delete' rows are tombstones.
deadletter  records that could not be applied, with the reason and the raw bytes.
intake      one audit row per micro-batch of the store's query: records in = applied + dead-lettered.
"""

from __future__ import annotations

# The store-key and entry columns are the backends' (they decide which a store carries), named here too
# so that every reader of the tables finds all the column names in one module.
from deltastate.stores.backends import backend_of
from deltastate.stores.backends.columns import DELETE_REASON as DELETE_REASON
from deltastate.stores.backends.columns import EVENTS as EVENTS
from deltastate.stores.backends.columns import KEY as KEY
from deltastate.stores.backends.columns import WINDOW_COLUMNS as WINDOW_COLUMNS
from deltastate.stores.backends.columns import WINDOW_END as WINDOW_END
from deltastate.stores.backends.columns import WINDOW_START as WINDOW_START
from deltastate.stores.definition import StoreDefinition

CHANGELOG = "changelog"
DEADLETTER = "deadletter"
INTAKE = "intake"

OP = "op"
# Bookkeeping columns, named here once: where a changelog row came from (the source record's
# partition and offset, the lineage, epoch and micro-batch that wrote it) and its two times.
VALUE_VERSION = "value_version"
SOURCE_PARTITION = "source_partition"
SOURCE_OFFSET = "source_offset"
EPOCH = "epoch"
BATCH_ID = "batch_id"
LINEAGE_ID = "lineage_id"
EVENT_TIME = "event_time"
WRITE_TIME = "write_time"
OP_PUT = "put"
OP_DELETE = "delete"
# Order of a key's records: epoch is the checkpoint lineage (it grows when a store is restored into
# a new checkpoint), batch_id the micro-batch within it. One record per key per (epoch, batch_id).
ORDER_COLUMNS = (EPOCH, BATCH_ID)
# Changelog partitioning: the stream appends to the newest segment only, so maintenance that rewrites
# older segments never conflicts with it (Delta: appends conflict with nothing; a rewrite conflicts
# only with appends to the same partitions).
SEGMENT = "segment"
BATCHES_PER_SEGMENT = 100

BOOKKEEPING_COLUMNS: tuple[tuple[str, str], ...] = (
    (OP, "string"),
    (VALUE_VERSION, "int"),
    (SOURCE_PARTITION, "int"),
    (SOURCE_OFFSET, "bigint"),
    (EPOCH, "int"),
    (BATCH_ID, "bigint"),
    (LINEAGE_ID, "string"),
    (EVENT_TIME, "timestamp"),
    (WRITE_TIME, "timestamp"),
    (SEGMENT, "bigint"),
)

# The lineage of the rows a migration seeds a new version's changelog with (the previous version's
# state transformed, epoch 0): they come from no micro-batch, so they have no audit row.
MIGRATION_SEED_LINEAGE = "deltastate-migration/seed"

REASON_EVICTED = "evicted"  # DELETE_REASON of an LRU store's eviction (null: a tombstone from the source)
REASON_LATE = "late"  # the dead-letter reason of a record past its window's or session's grace (counted in LATE)

DEADLETTER_COLUMNS: tuple[tuple[str, str], ...] = (
    ("reason", "string"),
    ("topic", "string"),
    ("partition", "int"),
    ("offset", "bigint"),
    ("kafka_timestamp", "timestamp"),
    ("key", "binary"),
    ("value", "binary"),
    ("value_size", "int"),
    (BATCH_ID, "bigint"),
    (LINEAGE_ID, "string"),
    (WRITE_TIME, "timestamp"),
)

# Audit columns of the intake table, named here once (changelog/intake.py is their one reader).
RECORDS_IN = "records_in"
APPLIED = "applied"
DEAD_LETTERED = "dead_lettered"
TOMBSTONES = "tombstones"
LATE = "late"
OFFSETS = "offsets"
STREAM_TIMES = "stream_times"
PARTITION_COUNTS = "partition_counts"
TOTALS_BEFORE = "totals_before"
# A batch's per-partition counts, in this order wherever they travel as a tuple.
AUDIT_COUNTS = (RECORDS_IN, APPLIED, DEAD_LETTERED, TOMBSTONES)

INTAKE_COLUMNS: tuple[tuple[str, str], ...] = (
    (LINEAGE_ID, "string"),
    (BATCH_ID, "bigint"),
    (RECORDS_IN, "bigint"),
    (APPLIED, "bigint"),
    (DEAD_LETTERED, "bigint"),
    (TOMBSTONES, "bigint"),
    # JSON {partition: [lo, hi]}: the offsets the batch covered (key-value stores: one past the
    # lineage's previous hi, or its first offset, up to the highest offset read)
    (OFFSETS, "string"),
    (LATE, "bigint"),  # dead letters with reason 'late' (window and session stores)
    # JSON {partition: newest event time (ms) of the applied records, of the batch or (key-value
    # stores) of the lineage so far}; a partition's stream time is the max of these over its batches
    # (Kafka Streams keeps stream time per partition).
    (STREAM_TIMES, "string"),
    (WRITE_TIME, "timestamp"),
    # JSON {partition: [records_in, applied, dead_lettered, tombstones]} of the batch. Added after the
    # first release, so last: older tables gain it on their next audit append (older rows read null).
    (PARTITION_COUNTS, "string"),
    # JSON of what the lineage's writer carried into the batch: key-value stores {"counts": {partition:
    # [records_in, applied, dead_lettered, tombstones]}, "hi": {partition: highest offset read}} summed
    # over the lineage's earlier batches; window and session stores {"stream_times": {partition: ms}}.
    # A run starts from its lineage's newest row (changelog/intake.py) instead of summing the
    # history. Added later still; older rows read null and make the start scan instead.
    (TOTALS_BEFORE, "string"),
)


def segment_of(epoch: int, batch_id: int) -> int:
    return epoch * 1_000_000_000 + batch_id // BATCHES_PER_SEGMENT


def store_key_columns(store: StoreDefinition) -> tuple[str, ...]:
    """The columns that identify one state entry: the key, plus the window or session bounds."""
    return backend_of(store).key_columns


def entry_count_columns(store: StoreDefinition) -> tuple[str, ...]:
    """The event count a window or session entry carries beside its values (merges read it back)."""
    return backend_of(store).entry_count_columns


def changelog_columns(store: StoreDefinition) -> list[tuple[str, str]]:
    """(name, spark SQL type) of the store's changelog, store key first."""
    backend = backend_of(store)
    events = [(c, "bigint") for c in backend.entry_count_columns]
    reason = [(c, "string") for c in backend.delete_reason_columns]
    return ([*backend.key_column_types] + [(f.name, f.spark_type) for f in store.value_fields] + events
            + list(BOOKKEEPING_COLUMNS) + reason)


def ddl(columns: list[tuple[str, str]] | tuple[tuple[str, str], ...]) -> str:
    return ", ".join(f"`{name}` {type_}" for name, type_ in columns)
