"""The live entries of a window or session store in Spark's state store (RocksDB), beside the
stream's checkpoint, so a micro-batch reads the entries it touches from local state instead of
reading the changelog back: a window store's batch looks up the windows its events fall into, a
session store's batch every session of the keys it touches.

Versions follow batch ids (io.deltastate.LiveEntryStore): counted from the batch that seeded the
state (S), batch N reads version N - S, which batch N-1 committed, and writes its changes at that
version, committing N - S + 1; a replayed batch reads and writes the same versions again. The
changelog stays the record: a checkpoint whose live entries were never written (a new lineage after
a restore or a migration seed, or a checkpoint that ran before this state existed) is seeded from
the changelog's live rows by its next batch, inside that batch's own write at version 0. The seeding
batch and the state's partition count are recorded when it is seeded (live.json); the partition
count is kept whatever the session's shuffle partitions are later.

Retention keeps the state small: reads skip entries past the batch's retention horizon, and a write
sweeps them out of the state store once the horizon has moved a quarter of the retention period
since the process last swept (a sweep visits every entry, so it is not paid per batch). An entry past
the horizon never changes again, so a sweep changes no answer, and a replayed batch may sweep or not.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from deltastate.changelog.deltalog import local_dir
from deltastate.changelog.layout import (
    EVENTS,
    OP,
    OP_DELETE,
    SOURCE_OFFSET,
    SOURCE_PARTITION,
    WINDOW_END,
    WINDOW_START,
    store_key_columns,
)
from deltastate.changelog.rules import retained_column
from deltastate.engine.common.lineage import Lineage
from deltastate.engine.common.steps import Select
from deltastate.stores.definition import StoreDefinition

FOLDER = "live"  # beside the query's checkpoint folder
MARKER = "live.json"
IS_DELETE = "is_delete"
_THROUGH = "_live_"  # write_through's state columns, beside the changelog columns of the same names
STATE_KEY = ("key", WINDOW_START, WINDOW_END)  # io.deltastate.LiveEntryStore.KEY_SCHEMA, in order
STATE_KEY_DDL = ", ".join(f"{c} {'string' if c == 'key' else 'bigint'}" for c in STATE_KEY)


class LiveStore:
    """One run's handle on a lineage's live entries. changelog_schema: the changelog table's, which
    gives the stored columns their types."""

    def __init__(self, spark: SparkSession, store: StoreDefinition, lineage: Lineage, changelog_schema: StructType,
                 partitions: int) -> None:
        self.spark = spark
        self.store = store
        self.folder = lineage.query_checkpoint(FOLDER)
        self.marker = Path(lineage.checkpoint) / MARKER
        self.run_id = str(uuid.uuid4())  # one per process: Spark keeps the loaded state between batches
        self.keys = list(store_key_columns(store))
        self.carried = [*store.value_columns, EVENTS, SOURCE_PARTITION, SOURCE_OFFSET]
        by_name = {f.name: f for f in changelog_schema.fields}
        self.values = StructType([by_name[c] for c in self.carried])
        recorded = self._recorded()
        self.partitions = recorded[0] if recorded else partitions
        self.seeded_batch = recorded[1] if recorded else None
        spec = store.window or store.session
        assert spec is not None
        self.sweep_column = STATE_KEY.index(retained_column(spec))
        self.sweep_every = max(spec.retention_ms // 4, 1)
        self.swept: int | None = None  # the horizon this process last swept at
        # Steps and JVM handles of every batch, built once (engine/common/steps.py).
        self._jstore = spark._jvm.io.deltastate.LiveEntryStore
        self._jread, self._jwrite_through = self._jstore.read, self._jstore.writeThrough
        self._values_type = spark._jsparkSession.parseDataType(self.values.json())
        self._asked = Select(spark, [F.col("key_str").alias("key"), F.col(WINDOW_START).cast("bigint"),
                                     F.col(WINDOW_END).cast("bigint")])
        self._retained = F.col(retained_column(spec))
        self._jjoin = spark._jvm.io.deltastate.LiveLookup.join
        self._jjoin_deleting = spark._jvm.io.deltastate.LiveLookup.joinDeleting
        self._jwith_entries = spark._jvm.io.deltastate.LiveLookup.withEntries
        self._entry_nulls = [F.lit(None).cast("bigint").alias(WINDOW_START), F.lit(None).cast("bigint").alias(WINDOW_END),
                             *[F.lit(None).cast(f.dataType).alias(f.name) for f in self.values.fields]]
        self._with_entry_columns: tuple[tuple[str, ...], Select] | None = None  # (records' columns, the select)
        self._found = Select(spark, [*self.keys, *self.carried])
        self._through_state = [F.col(c).alias(f"{_THROUGH}{c}") for c in self.keys]
        self._through_state += [(F.col(OP) == F.lit(OP_DELETE)).alias(f"{_THROUGH}{IS_DELETE}")]
        self._through_state += [F.col(c).alias(f"{_THROUGH}{c}") for c in self.carried]
        self._through: tuple[tuple[str, ...], Select] | None = None  # (changelog columns, the select)

    def _recorded(self) -> tuple[int, int] | None:
        """(partitions, seeding batch) from the marker; None when the entries must be seeded: no
        marker, or a marker that outlived its state (the live folder deleted by hand)."""
        folder = local_dir(self.folder)
        if folder is not None and not folder.is_dir():
            return None
        try:
            data = json.loads(self.marker.read_text())
            return int(data["partitions"]), int(data["seeded_batch"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def _version(self, batch_id: int) -> int:
        assert self.seeded_batch is not None
        return batch_id - self.seeded_batch

    def ready(self, batch_id: int) -> bool:
        """Whether version batch_id holds every live entry; a seeding batch that is replayed seeds again."""
        return self.seeded_batch is not None and self.seeded_batch < batch_id

    def read(self, wanted: DataFrame, batch_id: int, horizon_ms: int | None) -> DataFrame:
        """The live entries `wanted` names (columns key_str, window_start, window_end: the entry with
        those bounds, or with null bounds every entry of the key) retained at horizon_ms, as version
        batch_id holds them: the store key columns, then the value columns, events, source partition
        and offset."""
        found = DataFrame(self._jread(self._asked(wanted)._jdf, self._values_type, self.folder, self.run_id,
                                      self._version(batch_id), self.partitions), self.spark)
        if horizon_ms is not None:
            found = found.where(self._retained > F.lit(horizon_ms))
        return self._found(found)

    def by_key(self, rows: DataFrame, column: str) -> DataFrame:
        """rows partitioned by `column` (a store key) as the state's partitions are: what a batch
        hands to joined() so that its lookups, merge and state write stay in one task."""
        return rows.repartition(self.partitions, column)

    def joined(self, rows: DataFrame, batch_id: int, horizon_ms: int | None, prefix: str) -> DataFrame:
        """rows (key, window_start, window_end first) with the value columns, events, source partition
        and offset of the entry each names at version batch_id appended as prefix + name, null when
        none is live or it is past horizon_ms (io.deltastate.LiveLookup). Its rows must reach
        write_through of the same batch without a shuffle: the lookup's store is the one written."""
        return DataFrame(self._jjoin(rows._jdf, self._values_type, prefix, self.folder, self.run_id,
                                     self._version(batch_id), self.partitions,
                                     0 if horizon_ms is None else self.sweep_column,
                                     0 if horizon_ms is None else horizon_ms), self.spark)

    def joined_deleting(self, rows: DataFrame, batch_id: int, horizon_ms: int | None, prefix: str, deleted: str,
                        removed: str) -> DataFrame:
        """joined() for a batch with tombstones: a row whose boolean column `deleted` is set belongs
        to a key the batch deleted and is joined with no entry, or, with null bounds, marks the key.
        Each marked key's entries no row names follow, each as its marker with the entry's bounds
        and column `removed` true (io.deltastate.LiveLookup.joinDeleting)."""
        return DataFrame(self._jjoin_deleting(rows._jdf, self._values_type, prefix, removed, rows.columns.index(deleted),
                                              self.folder, self.run_id, self._version(batch_id), self.partitions,
                                              0 if horizon_ms is None else self.sweep_column,
                                              0 if horizon_ms is None else horizon_ms), self.spark)

    def with_entries(self, records: DataFrame, batch_id: int, horizon_ms: int | None, kind: str,
                     state_kind: int) -> DataFrame:
        """records (columns key, `kind`, then any) shuffled by key into the state's partitions, each
        partition holding, besides them, every entry of their keys that version batch_id holds and
        horizon_ms retains: rows of kind state_kind with the key, window_start, window_end and the
        value columns, events, source partition and offset, nulls in the records' other columns
        (io.deltastate.LiveLookup.withEntries). A merge over them that keeps each key's rows where it
        found them, and declares so (io.deltastate.SessionMerge), hands its rows to write_through of
        the same batch."""
        columns = tuple(records.columns)
        if self._with_entry_columns is None or self._with_entry_columns[0] != columns:
            assert columns[:2] == ("key", kind), columns
            self._with_entry_columns = columns, Select(self.spark, ["key", *self._entry_nulls, *columns[1:]])
        rows = self._with_entry_columns[1](records)
        return DataFrame(self._jwith_entries(rows._jdf, self._values_type, self.folder, self.run_id,
                                             self._version(batch_id), self.partitions, 3 + len(self.values.fields),
                                             state_kind, 0 if horizon_ms is None else self.sweep_column,
                                             0 if horizon_ms is None else horizon_ms), self.spark)

    def advance(self, batch_id: int) -> None:
        """A batch without records commits its version unchanged, so the next batch finds it."""
        if self.ready(batch_id):
            schema = StructType([*self.values.fields])
            empty = self.spark.createDataFrame([], f"{STATE_KEY_DDL}, {IS_DELETE} boolean").crossJoin(
                self.spark.createDataFrame([], schema))
            self.spark._jvm.io.deltastate.LiveEntryStore.write(empty._jdf, self.folder, self.run_id,
                                                               self._version(batch_id), self.partitions, 0, 0)

    def _sweep_at(self, horizon_ms: int | None) -> int | None:
        """The horizon to sweep at in this write, None for no sweep."""
        if horizon_ms is None or (self.swept is not None and horizon_ms - self.swept < self.sweep_every):
            return None
        return horizon_ms

    def write_through(self, rows: DataFrame, batch_id: int, horizon_ms: int | None) -> DataFrame:
        """rows (the batch's changelog rows) whose computation applies them at version batch_id, as
        `write` does, inside the job that consumes them: the batch's changelog write writes the state
        too, and the rows are computed once, without a cache. Once the batch is seeded only; a job
        that fails before the batch's commit leaves the next version partly written, and the
        batch's replay writes it again from this one."""
        if self._through is None or self._through[0] != tuple(rows.columns):
            columns = tuple(rows.columns)
            self._through = columns, Select(self.spark, [*self._through_state, *columns])
        sweep = self._sweep_at(horizon_ms)
        through = self._jwrite_through(
            self._through[1](rows)._jdf, len(self.carried), self.folder, self.run_id,
            self._version(batch_id), self.partitions, 0 if sweep is None else self.sweep_column,
            0 if sweep is None else sweep)
        if sweep is not None:
            self.swept = sweep  # a failed batch ends the run, and a new run sweeps at its first write
        return DataFrame(through, self.spark)

    def write(self, rows: DataFrame, batch_id: int, seed: DataFrame | None, horizon_ms: int | None) -> None:
        """Applies the batch's changelog rows (puts and deletes) at version batch_id; with seed (the
        changelog's live entries before this batch), those too, except the entries the batch changes.
        horizon_ms: the batch's retention horizon (None: no partition has a stream time yet)."""
        changes = rows.select(*self.keys, (F.col(OP) == F.lit(OP_DELETE)).alias(IS_DELETE), *self.carried)
        if seed is not None:
            kept = seed.join(changes.select(*self.keys), self.keys, "left_anti")
            changes = kept.select(*self.keys, F.lit(False).alias(IS_DELETE), *self.carried).unionByName(changes)
        version = 0 if seed is not None else self._version(batch_id)
        sweep = self._sweep_at(horizon_ms)
        self.spark._jvm.io.deltastate.LiveEntryStore.write(changes._jdf, self.folder, self.run_id, version,
                                                           self.partitions, 0 if sweep is None else self.sweep_column,
                                                           0 if sweep is None else sweep)
        if sweep is not None:
            self.swept = sweep
        if seed is not None:
            self.marker.write_text(json.dumps({"partitions": self.partitions, "seeded_batch": batch_id}))
            self.seeded_batch = batch_id
