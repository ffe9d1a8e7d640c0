"""Seeding version N from version N-1: the live state at the offsets its stream committed, in version
N's shape, written once as N's first changelog records and as the seed of N's new checkpoint.

Why "at the committed offsets": the live stream keeps running while N is built. Its audit (intake)
is read first and says, per partition, the next offset it has not processed; only changelog records
below those offsets are folded into the seed, so a batch whose changelog landed but whose audit row
had not is left out of the seed and processed by N itself, from exactly those offsets: every record
once, none twice. Cleanup tombstones (TTL, retention) come from no offset and are always taken.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from deltastate.changelog import layout
from deltastate.changelog.reader import STATE_BOOKKEEPING, state_columns
from deltastate.changelog.rules import latest_per_key
from deltastate.changelog.tables import append_once, table_exists
from deltastate.config import Settings
from deltastate.engine.common.checkpoint_check import CLEANUP_PREFIX
from deltastate.maintenance.restore import audit_offsets
from deltastate.stores.definition import StoreDefinition
from deltastate.stores.expression import parse, to_column


def committed_state(spark: SparkSession, settings: Settings, live: StoreDefinition) -> tuple[DataFrame, dict[int, int]]:
    """(live state rows below the committed offsets, partition -> next offset to process)."""
    offsets = audit_offsets(spark, settings, live)  # before the changelog: see the module doc
    path = settings.table_path(live.storage, layout.CHANGELOG)
    if not table_exists(spark, path) or not offsets:
        empty = spark.createDataFrame([], ", ".join(f"`{c}` string" for c in state_columns(live)))
        return empty, offsets
    ends = F.create_map(*[x for p, o in sorted(offsets.items()) for x in (F.lit(p), F.lit(o))])
    below = F.col("source_offset") < F.coalesce(F.try_element_at(ends, F.col("source_partition")), F.lit(-1))
    records = spark.read.format("delta").load(path).where(F.col("lineage_id").startswith(CLEANUP_PREFIX) | below)
    latest = latest_per_key(records, layout.store_key_columns(live), [*live.value_columns, *STATE_BOOKKEEPING])
    return latest.select(*state_columns(live)), offsets


def transformed(state: DataFrame, live: StoreDefinition, target: StoreDefinition) -> DataFrame:
    """`state` of the live version in the target version's state columns (state_columns(target))."""
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
    values = []
    for f in target.value_fields:
        if f.name in aggregated:
            values.append(aggregated[f.name].alias(f.name))
        else:
            [derived] = [d for d in target.derived if d.target == f.name]
            values.append(to_column(parse(derived.expression), aggregated).cast(f.spark_type).alias(f.name))
    return state.select(*layout.store_key_columns(target), *values,
                        F.col("source_partition"), F.col("source_offset"),
                        F.lit(0).cast("int").alias("epoch"), F.lit(0).cast("bigint").alias("batch_id"),
                        F.col("event_time"), F.current_timestamp().alias("write_time"))


def seed_changelog(seed: DataFrame, target: StoreDefinition, settings: Settings) -> None:
    """The seed as the target version's first changelog records (epoch 0, one idempotent append: a
    start repeated after a crash does not write it twice)."""
    rows = seed.select(
        *layout.store_key_columns(target), *target.value_columns,
        F.lit(layout.OP_PUT).alias(layout.OP), F.lit(target.value_version).cast("int").alias("value_version"),
        F.col("source_partition").cast("int"), F.col("source_offset").cast("bigint"),
        F.col("epoch"), F.col("batch_id"), F.lit(layout.MIGRATION_SEED_LINEAGE).alias("lineage_id"),
        F.col("event_time"), F.col("write_time"),
        F.lit(layout.segment_of(0, 0)).cast("bigint").alias(layout.SEGMENT))
    app_id = f"{layout.MIGRATION_SEED_LINEAGE}/{target.name}/v{target.value_version}"
    append_once(rows, settings.table_path(target.storage, layout.CHANGELOG), app_id, 0)
