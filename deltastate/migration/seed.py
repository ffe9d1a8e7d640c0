"""Seeding version N from version N-1: the live state at the offsets its stream committed, in version
N's shape, written once as N's first changelog records and as the seed of N's new checkpoint.

Why "at the committed offsets": the live stream keeps running while N is built. Its audit (intake)
is read first and says, per partition, the next offset it has not processed; only changelog records
below those offsets are folded into the seed, so a batch whose changelog landed but whose audit row
had not is left out of the seed and processed by N itself, from exactly those offsets: every record
once, none twice. Cleanup tombstones (TTL, retention) come from no offset and are always taken.

Window and session stores also carry each entry's event count (their merges read it back), and the
live stream times at those offsets: N's first batches must find the same windows open, and the same
records late, as the live version would. They are written as an audit row of the seed (no records,
no offsets) in N's intake table, where every run of N, and a restore of N, reads stream times from.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from deltastate.changelog import layout
from deltastate.changelog.audit_log import append_audit, audit_record, audit_rows
from deltastate.changelog.bookkeeping import bookkeeping_columns
from deltastate.changelog.intake import AuditPosition, audit_position, carried_stream_times_json
from deltastate.changelog.layout import (
    BATCH_ID,
    EPOCH,
    EVENT_TIME,
    LINEAGE_ID,
    SOURCE_OFFSET,
    SOURCE_PARTITION,
    WRITE_TIME,
)
from deltastate.changelog.reader import STATE_BOOKKEEPING
from deltastate.changelog.rules import latest_per_key
from deltastate.changelog.tables import append_once, table_exists
from deltastate.config import Settings
from deltastate.engine.common.checkpoint_check import CLEANUP_PREFIX
from deltastate.stores.definition import StoreDefinition
from deltastate.stores.expression import value_column


def _entry_columns(store: StoreDefinition) -> list[str]:
    """A state entry's columns: state_columns, and the event count of a window or session entry."""
    return [*layout.store_key_columns(store), *store.value_columns, *layout.entry_count_columns(store),
            *STATE_BOOKKEEPING]


def committed_state(spark: SparkSession, settings: Settings, live: StoreDefinition) -> tuple[DataFrame, AuditPosition]:
    """(live state entries below the committed offsets, the audit position they stand at)."""
    position = audit_position(spark, settings, live)  # before the changelog: see the module doc
    offsets = position.next_offsets
    path = settings.table_path(live.storage, layout.CHANGELOG)
    if not table_exists(spark, path) or not offsets:
        types = dict(layout.changelog_columns(live))
        empty = spark.createDataFrame([], ", ".join(f"`{c}` {types.get(c, 'string')}" for c in _entry_columns(live)))
        return empty, position
    ends = F.create_map(*[x for p, o in sorted(offsets.items()) for x in (F.lit(p), F.lit(o))])
    below = F.col(SOURCE_OFFSET) < F.coalesce(F.try_element_at(ends, F.col(SOURCE_PARTITION)), F.lit(-1))
    records = spark.read.format("delta").load(path).where(F.col(LINEAGE_ID).startswith(CLEANUP_PREFIX) | below)
    columns = _entry_columns(live)
    latest = latest_per_key(records, layout.store_key_columns(live), columns[len(layout.store_key_columns(live)):])
    return latest.select(*columns), position


def transformed(state: DataFrame, live: StoreDefinition, target: StoreDefinition) -> DataFrame:
    """`state` of the live version in the target version's entry columns."""
    [step] = [s for s in target.history if s.version == target.value_version]
    old_name = {new: old for old, new in step.renamed}
    defaults = dict(step.defaults)
    aggregated: dict[str, Column] = {}
    for agg in target.aggregations:
        wanted = target.value_field(agg.target).spark_type
        if agg.target in step.added:
            default = defaults.get(agg.target)
            aggregated[agg.target] = F.lit(default).cast(wanted)
        else:
            aggregated[agg.target] = F.col(old_name.get(agg.target, agg.target)).cast(wanted)
    values = [value_column(target, f.name, aggregated).cast(f.spark_type).alias(f.name) for f in target.value_fields]
    return state.select(*layout.store_key_columns(target), *values, *layout.entry_count_columns(target),
                        F.col(SOURCE_PARTITION), F.col(SOURCE_OFFSET),
                        F.lit(0).cast("int").alias(EPOCH), F.lit(0).cast("bigint").alias(BATCH_ID),
                        F.col(EVENT_TIME), F.current_timestamp().alias(WRITE_TIME))


def seed_changelog(seed: DataFrame, target: StoreDefinition, settings: Settings) -> None:
    """The seed as the target version's first changelog records (epoch 0, one idempotent append: a
    start repeated after a crash does not write it twice)."""
    rows = seed.select(
        *layout.store_key_columns(target), *target.value_columns,
        *layout.entry_count_columns(target),
        *bookkeeping_columns(op=layout.OP_PUT, value_version=target.value_version,
                             source_partition=F.col(SOURCE_PARTITION), source_offset=F.col(SOURCE_OFFSET),
                             epoch=F.col(EPOCH), batch_id=F.col(BATCH_ID), lineage_id=layout.MIGRATION_SEED_LINEAGE,
                             event_time=F.col(EVENT_TIME), write_time=F.col(WRITE_TIME),
                             segment=layout.segment_of(0, 0)))
    append_once(rows, settings.table_path(target.storage, layout.CHANGELOG), _app_id(target), 0)


def seed_stream_times(spark: SparkSession, settings: Settings, target: StoreDefinition,
                      stream_times: dict[int, int]) -> None:
    """The live version's stream times as the seed's audit row in the target's intake table (window
    and session stores; one idempotent append)."""
    row = audit_record(layout.MIGRATION_SEED_LINEAGE, 0, {}, {}, stream_times, carried_stream_times_json(stream_times))
    append_audit(audit_rows(spark, [row]), settings.table_path(target.storage, layout.INTAKE), _app_id(target), 0)


def _app_id(target: StoreDefinition) -> str:
    return f"{layout.MIGRATION_SEED_LINEAGE}/{target.name}/v{target.value_version}"
