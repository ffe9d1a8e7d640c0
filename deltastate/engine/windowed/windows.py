"""One micro-batch of a window store, in batch SQL: each event's open windows (found by
windowed_records) exploded, aggregated per window and merged with the store's state.

Kafka Streams' rules (TimeWindows): windows are aligned to the epoch, [start, start + size), a new
one every `advance`; an event belongs to every window containing its time. A window is open while
stream time < end + grace; an event none of whose windows is open is late. A delete (null value, or
the store's tombstone field) removes every window of the key that exists at that offset.
"""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from deltastate.changelog.layout import EVENTS, KEY, SOURCE_OFFSET, SOURCE_PARTITION, WINDOW_END, WINDOW_START
from deltastate.engine.common.steps import Aggregate, Join, Select
from deltastate.engine.windowed.records import IS_DELETE, W_FIRST, W_LAST
from deltastate.stores.definition import Aggregation, StoreDefinition
from deltastate.stores.ops import MEAN, op, spark_merge, spark_partial

OLD = "o_"  # the state's values beside a batch's partials: o_<value>, o_events
ByKey = Callable[[DataFrame, str], DataFrame]  # (rows, key column) -> rows partitioned as the state is
Joined = Callable[[DataFrame, str], DataFrame]  # (rows, prefix) -> rows with their entries' values
# (rows, prefix, deleted column, removed column) -> rows with their entries' values, a deleted key's
# rows without, its entries no row re-creates appended as removals (LiveStore.joined_deleting)
JoinedDeleting = Callable[[DataFrame, str, str, str], DataFrame]
DELETE_OFFSET = "delete_offset"  # a record's key's last tombstone in the batch, null for none
KEY_DELETED = "key_deleted"
REMOVED = "removed"


def _partial(a: Aggregation) -> list[Column]:
    """Batch partial of one aggregation over a (key, window) group of events (stores/ops.py)."""
    return [spark_partial(a.op, a.source_field, F.col("offset")).alias(f"p_{a.target}")]


def merged_value(a: Aggregation, old: str, new: str, old_events: Column, new_events: Column) -> Column:
    """Value of one aggregation after adding a batch partial (new) to the state's value (old, may be
    null when the window is new). Keys are partition-local, so a batch's events all come after the
    state's. avg keeps the mean itself, so its partial sum is weighed with the events on each side."""
    o, n = F.col(old), F.col(new)
    if op(a.op).combine == MEAN:
        total = F.coalesce(o * old_events, F.lit(0.0)) + n
        return total / (F.coalesce(old_events, F.lit(0)) + new_events)
    return spark_merge(a.op, o, n)


class WindowPlan:
    """A window store's batch steps, built once per run (engine/common/steps.py)."""

    def __init__(self, spark: SparkSession, store: StoreDefinition) -> None:
        w = store.window
        assert w is not None
        self.store = store
        starts = F.sequence(F.col(W_FIRST), F.col(W_LAST), F.lit(w.advance_ms).cast("bigint"))
        self._explode = Select(spark, ["*", F.explode(starts).alias(WINDOW_START)])
        self._end = Select(spark, ["*", (F.col(WINDOW_START) + F.lit(w.size_ms)).alias(WINDOW_END)])
        partials = [
            *[p for a in store.aggregations for p in _partial(a)],
            F.count(F.lit(1)).alias("p_events"),
            F.max("partition").alias(SOURCE_PARTITION),
            F.max("offset").alias(SOURCE_OFFSET),
            F.max(store.event_time_field).alias("event_ms"),
        ]
        self._partials = Aggregate(spark, [F.col("key_str").alias(KEY), WINDOW_START, WINDOW_END], partials)
        # A batch with tombstones, joined in place (joined_changes). Keys are partition-local, so
        # records partitioned by key see their key's last tombstone over that partition's rows; the
        # events before it are deleted with the key, and it stays as the key's marker (null bounds),
        # whose group carries the tombstone's position to the removals.
        last_delete = F.max(F.when(F.col(IS_DELETE), F.col("offset"))).over(Window.partitionBy("key_str"))
        self._last_delete = Select(spark, ["*", last_delete.alias(DELETE_OFFSET)])
        deleted = F.col(DELETE_OFFSET).isNotNull()
        self._survives = F.when(F.col(IS_DELETE), F.col("offset") == F.col(DELETE_OFFSET)).otherwise(
            ~deleted | (F.col("offset") > F.col(DELETE_OFFSET)))
        marker_or_starts = F.when(F.col(IS_DELETE), F.array(F.lit(None).cast("bigint"))).otherwise(starts)
        self._explode_marked = Select(spark, ["*", F.explode(marker_or_starts).alias(WINDOW_START),
                                              deleted.alias(KEY_DELETED)])
        self._deleting_partials = Aggregate(spark, [F.col("key_str").alias(KEY), WINDOW_START, WINDOW_END, KEY_DELETED],
                                            partials)
        self._old = Select(spark, [KEY, WINDOW_START, WINDOW_END,
                                   *[F.col(a.target).alias(f"{OLD}{a.target}") for a in store.aggregations],
                                   F.col(EVENTS).alias(f"{OLD}{EVENTS}")])
        self._join = Join(spark, [KEY, WINDOW_START, WINDOW_END], "left")
        old_events = F.col(f"{OLD}{EVENTS}")
        values = [merged_value(a, f"{OLD}{a.target}", f"p_{a.target}", old_events, F.col("p_events"))
                  .cast(store.value_field(a.target).spark_type).alias(a.target) for a in store.aggregations]
        events = F.coalesce(old_events, F.lit(0)) + F.col("p_events")
        self._puts = Select(spark, [KEY, WINDOW_START, WINDOW_END, *values, events.alias(EVENTS),
                                    SOURCE_PARTITION, SOURCE_OFFSET, "event_ms"])
        removed = F.col(REMOVED)  # a removal's values are its marker's: changelog_select drops them
        self._mixed = Select(spark, [KEY, WINDOW_START, WINDOW_END, *values, F.when(~removed, events).alias(EVENTS),
                                     SOURCE_PARTITION, SOURCE_OFFSET, F.when(~removed, F.col("event_ms")).alias("event_ms"),
                                     removed.alias(IS_DELETE)])

    def contributions(self, events: DataFrame, delete_offsets: DataFrame | None) -> DataFrame:
        """(event x open window) rows that survive the key's last delete in the batch; `events` are
        batch_records() rows that are not late (their open windows start at w_first .. w_last).
        Deletes are matched before the explode, which multiplies the rows by size/advance."""
        if delete_offsets is not None:
            events = (events.join(delete_offsets, "key_str", "left")
                      .where(F.col("delete_offset").isNull() | (F.col("offset") > F.col("delete_offset"))))
        return self._end(self._explode(events))

    def joined_puts(self, contributions: DataFrame, by_key: ByKey, joined: Joined) -> DataFrame:
        """puts of a batch that deletes nothing, the state joined where it lies: the contributions
        partitioned by key as the state is, their partials aggregated in place and each joined with
        its entry by a lookup (LiveStore.joined); the puts stay partitioned by key."""
        return self._puts(joined(self._partials(by_key(contributions, "key_str")), OLD))

    def joined_changes(self, records: DataFrame, by_key: ByKey, joined: JoinedDeleting) -> DataFrame:
        """puts and removals (marked is_delete, one frame) of a batch with tombstones, the state joined
        where it lies: `records` (its events that are not late, and its tombstones) partitioned by
        key as the state is; a deleted key's windows its later events re-create start empty, and
        its other entries are removed at its last tombstone's position (LiveStore.joined_deleting).
        Everything stays in the records' partitions."""
        marked = self._last_delete(by_key(records, "key_str")).where(self._survives)
        partials = self._deleting_partials(self._end(self._explode_marked(marked)))
        return self._mixed(joined(partials, OLD, KEY_DELETED, REMOVED))

    def changes(self, contributions: DataFrame, state: DataFrame,
                deleted_keys: DataFrame | None) -> tuple[DataFrame, DataFrame | None]:
        """(puts, deletes) of the batch. puts: key, window bounds, value columns, events, source
        partition/offset, event_ms. deletes (None when the batch deletes nothing): key, window
        bounds of state entries the batch's deletes removed and no later event re-created."""
        partials = self._partials(contributions)
        alive = state if deleted_keys is None else state.join(deleted_keys, KEY, "left_anti")
        puts = self._puts(self._join(partials, self._old(alive)))
        if deleted_keys is None:
            return puts, None
        removed = (state.join(deleted_keys, KEY, "left_semi")
                   .join(partials.select(KEY, WINDOW_START, WINDOW_END), [KEY, WINDOW_START, WINDOW_END], "left_anti"))
        return puts, removed.select(KEY, WINDOW_START, WINDOW_END)
