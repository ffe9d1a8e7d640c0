"""The live entries of a window or session store read back from its changelog: what seeds the
state store of a checkpoint that has none yet (live_store.py).

An entry can only change while its window is open (or, for sessions, while an event can still merge
into it), so the live entries are the latest row per entry within the retention horizon; Delta's
file statistics on the window bounds skip the rest of the history.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from deltastate.changelog.layout import (
    BATCH_ID,
    CHANGELOG,
    EPOCH,
    EVENTS,
    SOURCE_OFFSET,
    SOURCE_PARTITION,
    store_key_columns,
)
from deltastate.changelog.rules import latest_per_key, retained_column
from deltastate.config import Settings
from deltastate.engine.common.lineage import Lineage
from deltastate.stores.definition import StoreDefinition


def live_entries(spark: SparkSession, settings: Settings, store: StoreDefinition, lineage: Lineage,
                 batch_id: int, keys: DataFrame | None, horizon_ms: int | None) -> DataFrame:
    """Latest put per (key, window) for the keys in `keys` (column key_str; None: every key) that are
    retained at horizon_ms (rules.retained_column greater than it). Rows an earlier attempt of this
    very batch (or a later one) wrote are ignored, so a replayed batch computes exactly what its first
    attempt did."""
    changelog = spark.read.format("delta").load(settings.table_path(store.storage, CHANGELOG))
    earlier = ~((F.col(EPOCH) == F.lit(lineage.epoch)) & (F.col(BATCH_ID) >= F.lit(batch_id)))
    rows = changelog.where(earlier)
    if horizon_ms is not None:
        spec = store.window or store.session
        assert spec is not None
        rows = rows.where(F.col(retained_column(spec)) > F.lit(horizon_ms))
    if keys is not None:
        rows = rows.join(F.broadcast(keys.select(F.col("key_str").alias("key")).distinct()), "key", "left_semi")
    return latest_per_key(rows, store_key_columns(store),
                          [*store.value_columns, EVENTS, SOURCE_PARTITION, SOURCE_OFFSET])
