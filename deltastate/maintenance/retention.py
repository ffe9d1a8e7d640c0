"""Window retention and session expiry: tombstones appended straight to the changelog.

Why straight to the changelog (unlike key-value TTL): the window and session engine reads its live
state from the changelog and never touches a closed window again, so nothing in Spark's state can
bring an expired window back. Stream time is per source partition (Kafka Streams keeps it per
partition): the max over the intake audit's `stream_times` of that partition. An entry is removed
when the store no longer retains it (changelog/rules.py is_retained, Kafka Streams' fetch rule):
the rule the snapshot, fresh reads and the engine's state read apply too. Retention is at least
size + grace (window) or gap + grace (session), so an entry past retention is closed.

A tombstone copies the expired entry's store key, source partition and offset; its value columns
are null, and it is ordered after every record at the read version: (newest epoch, newest batch id
+ 1). It goes into the newest segment, which compaction never rewrites, so the append does not
conflict with compaction. lineage_id names cleanup. Reruns are idempotent: an expired entry has a
tombstone as its latest record and is no longer state; two cleanups of the same version are one
append (Delta's idempotent write, txnAppId per store, txnVersion = the read version).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from deltastate.changelog import layout
from deltastate.changelog.bookkeeping import bookkeeping_by_name
from deltastate.changelog.intake import stream_times_frame
from deltastate.changelog.layout import (
    BATCH_ID,
    EPOCH,
    EVENT_TIME,
    SOURCE_OFFSET,
    SOURCE_PARTITION,
    VALUE_VERSION,
)
from deltastate.changelog.rules import latest_per_key, retained_column, retention_horizon
from deltastate.changelog.tables import append_once
from deltastate.config import Settings
from deltastate.stores.backends import backend_of
from deltastate.stores.definition import SessionSpec, StoreDefinition, WindowSpec

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def retention_spec(store: StoreDefinition) -> WindowSpec | SessionSpec:
    spec = backend_of(store).retention_spec(store)
    if spec is None:
        raise ValueError(f"store {store.name!r} of type {store.type} has no window/session settings")
    return spec


def expire_windows(spark: SparkSession, settings: Settings, store: StoreDefinition, version: int,
                   write_ms: int) -> int:
    """Appends tombstones for the expired entries of the changelog at `version`; returns how many."""
    from pyspark.sql import functions as F

    path = settings.table_path(store.storage, layout.CHANGELOG)
    spec = retention_spec(store)
    table = spark.read.format("delta").option("versionAsOf", version).load(path)
    keys = layout.store_key_columns(store)
    latest = latest_per_key(table, keys, [c for c in table.columns if c not in keys])
    # One row per source partition: the horizons are computed here, by the one rule, and compared
    # in Spark. A partition without stream time expires nothing.
    horizons = [(int(r[SOURCE_PARTITION]), retention_horizon(spec, int(r["stream_time"])))
                for r in stream_times_frame(spark, settings, store).collect()]
    if not horizons:
        return 0
    pairs = [c for p, h in sorted(horizons) for c in (F.lit(p), F.lit(h).cast("bigint"))]
    horizon = F.element_at(F.create_map(*pairs), F.col(SOURCE_PARTITION))
    expired = latest.where(horizon.isNotNull() & (F.col(retained_column(spec)) <= horizon))
    top = table.agg(F.max(EPOCH).alias("e")).first()["e"]
    if top is None:
        return 0
    newest = table.where(F.col(EPOCH) == top).agg(F.max(BATCH_ID).alias("b"), F.max(layout.SEGMENT).alias("s")).first()
    ordering = (int(top), int(newest["b"]) + 1, int(newest["s"]))
    tombstones = expired.select(*[_tombstone_column(f.name, f.dataType, store, ordering, write_ms)
                                  for f in table.schema.fields]).persist()
    try:
        count = tombstones.count()
        if count:
            append_once(tombstones, path, f"deltastate/{store.name}/cleanup", version)
        return count
    finally:
        tombstones.unpersist()


def _cleanup_lineage_id(store: StoreDefinition) -> str:
    lineage_id = backend_of(store).cleanup_lineage_id
    if lineage_id is None:
        raise ValueError(f"store {store.name!r} of type {store.type} appends no cleanup tombstones")
    return lineage_id


def _tombstone_column(name: str, data_type, store: StoreDefinition, ordering: tuple[int, int, int], write_ms: int):
    from pyspark.sql import functions as F

    epoch, batch_id, segment = ordering
    if name in layout.store_key_columns(store):
        return F.col(name)
    # The entry's own source position, event time and value version; the cleanup's op, lineage and order.
    fixed = bookkeeping_by_name(
        op=layout.OP_DELETE, value_version=F.col(VALUE_VERSION), source_partition=F.col(SOURCE_PARTITION),
        source_offset=F.col(SOURCE_OFFSET), epoch=epoch, batch_id=batch_id, lineage_id=_cleanup_lineage_id(store),
        event_time=F.col(EVENT_TIME), write_time=F.timestamp_millis(F.lit(write_ms)), segment=segment)
    if name in fixed:
        return fixed[name]
    return F.lit(None).cast(data_type).alias(name)  # value columns (and any the engine adds)
