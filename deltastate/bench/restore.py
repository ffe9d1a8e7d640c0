"""Restore benchmark: how long `restore` takes on a long history, before and after compaction.

Producing 10M events through Kafka would take longer than the point needs, so the changelog is
built directly with Spark, as the stream would have written it: `keys` keys, each updated in
`updates` micro-batch generations (generation g is batch g * BATCHES_PER_SEGMENT, one segment
each, so compaction can rewrite every generation but the newest). Restore runs once on that
history, then the changelog is compacted (deltastate.maintenance.compact) and restore runs again.
Both restores rebuild the same live state (one row per key); the difference is the history read.
"""

from __future__ import annotations

import dataclasses
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from deltastate.changelog import layout
from deltastate.changelog.bookkeeping import bookkeeping_columns
from deltastate.config import Settings

STORE = "player_stats"


@dataclass(frozen=True)
class RestoreFigures:
    keys: int
    updates: int
    cores: int
    build_seconds: float
    records_before: int
    restore_before: float
    compact_seconds: float
    records_after: int
    restore_after: float
    restored_before: int
    restored_after: int

    @property
    def ratio(self) -> float:
        return self.restore_before / self.restore_after if self.restore_after else 0.0

    def lines(self) -> list[str]:
        return [
            f"bench restore {STORE}: {self.keys:,} keys x {self.updates} updates, {self.cores} cores",
            f"  build changelog (untimed): {self.build_seconds:8.1f} s  {self.records_before:>12,} records",
            f"  restore before compaction: {self.restore_before:8.1f} s  ({self.restored_before:,} live keys restored)",
            f"  compact (untimed):         {self.compact_seconds:8.1f} s  {self.records_after:>12,} records left",
            f"  restore after compaction:  {self.restore_after:8.1f} s  ({self.restored_after:,} live keys restored)",
            f"  ratio before/after:        {self.ratio:8.2f}x",
        ]


def build_changelog(spark, settings: Settings, store, keys: int, updates: int) -> int:
    """keys x updates put records: generation g gives every key its (g+1)-th game."""
    from pyspark.sql import functions as F

    from deltastate.changelog.tables import ensure_tables

    ensure_tables(spark, settings, store)
    lineage = uuid.uuid4().hex
    ids = spark.range(0, keys * updates)
    key_no, gen = F.col("id") % keys, (F.col("id") / keys).cast("bigint")
    games = gen + 1
    ts = F.lit(1_700_000_000_000) + gen * 60_000 + key_no
    rows = ids.select(
        F.format_string("player-%07d", key_no).alias(layout.KEY),
        games.alias("games"), (games * 50).alias("total_score"), (F.lit(50) + gen).alias("best_score"),
        ts.alias("last_played"),
        *bookkeeping_columns(op=layout.OP_PUT, value_version=store.value_version, source_partition=F.pmod(key_no, 4),
                             source_offset=gen * keys + key_no,  # increasing per partition, like Kafka offsets
                             epoch=0, batch_id=gen * layout.BATCHES_PER_SEGMENT, lineage_id=lineage,
                             event_time=F.timestamp_millis(ts),
                             segment=gen),  # layout.segment_of(0, gen * BATCHES_PER_SEGMENT) == gen
    )
    columns = [name for name, _ in layout.changelog_columns(store)]
    rows.select(*columns).write.format("delta").mode("append").save(settings.table_path(store.storage, layout.CHANGELOG))
    return keys * updates


def run_restore_bench(settings: Settings, keys: int, updates: int,
                      progress: Callable[[str], None] = lambda line: None) -> RestoreFigures:
    """progress: one line as each step ends (the figures also come back whole at the end)."""
    from deltastate.infra.spark import get_spark
    from deltastate.maintenance.restore import restore_store
    from deltastate.stores import load_store

    root = Path(settings.home) / "bench" / f"restore-{uuid.uuid4().hex[:8]}"
    bench = dataclasses.replace(settings, storage_root=str(root / "data"))
    store = load_store(bench, STORE)
    spark = get_spark(bench, "deltastate-bench-restore")

    t0 = time.monotonic()
    records = build_changelog(spark, bench, store, keys, updates)
    built = time.monotonic() - t0
    progress(f"built {records:,} changelog records in {built:.1f} s")

    before = restore_store(bench, STORE, spark=spark)
    progress(f"restore before compaction: {before.seconds:.1f} s ({before.records_restored:,} keys)")

    t0 = time.monotonic()
    compacted = _compact(spark, bench, store)
    compact_seconds = time.monotonic() - t0
    progress(f"compacted to {compacted:,} records in {compact_seconds:.1f} s")

    after = restore_store(bench, STORE, spark=spark)
    return RestoreFigures(keys, updates, os.cpu_count() or 1, built, records, before.seconds, compact_seconds,
                          compacted, after.seconds, before.records_restored, after.records_restored)


def _compact(spark, settings: Settings, store) -> int:
    """The project's compaction; records left in the changelog afterwards."""
    from deltastate.maintenance.compact import compact_store

    compact_store(settings, store.name, spark=spark)
    return spark.read.format("delta").load(settings.table_path(store.storage, layout.CHANGELOG)).count()
