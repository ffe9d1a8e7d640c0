"""One micro-batch's changes to a window or session store, planned over its classified records
(records.py) and the live entries it touches (live_store.py): a window store's windows merged with
their entries, a session store's sessions merged record by record (sessions.py). The steps of each
plan are built once per run (engine/common/steps.py); batch.py writes what they return."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from deltastate.changelog.layout import KEY, SOURCE_OFFSET, SOURCE_PARTITION, WINDOW_END, WINDOW_START
from deltastate.engine.common.steps import Select, SortWithinPartitions, Where
from deltastate.engine.windowed import sessions as session_merge
from deltastate.engine.windowed.records import IS_DELETE, IS_EVENT, IS_LATE, event_fields, session_store_time
from deltastate.engine.windowed.stream_time import STREAM_TIME
from deltastate.engine.windowed.windows import ByKey, Joined, JoinedDeleting, WindowPlan
from deltastate.stores.definition import StoreDefinition


@dataclass(frozen=True)
class WindowedChanges:
    """What one micro-batch changes in a window or session store.

    puts     entries to write (key, bounds, values, events, source position, event time); with
             `mixed`, the session merge's put and delete rows in one frame, deletes marked is_delete;
    removed  entries deleted (by a tombstone, or superseded by a session merge), or None;
    late     (partition, offset) of records the session merge found late; None for window stores,
             whose late records are known from the first pass over the batch;
    any_late whether `late` holds any row, asked once the batch's changes have been computed (counted
             while the merge ran, so a batch without late records asks no job for their counts);
    cached   frames the step persisted or checkpointed, released once the batch is written."""

    puts: DataFrame
    removed: DataFrame | None = None
    late: DataFrame | None = None
    any_late: Callable[[], bool] = lambda: True
    cached: tuple[DataFrame, ...] = ()
    mixed: bool = False


# The live entries a batch asks for (columns key_str, window_start, window_end): an entry by its
# bounds, or every entry of a key with null bounds.
Entries = Callable[[DataFrame], DataFrame]


def _whole_keys(spark: SparkSession) -> Select:
    """rows (column key_str) -> the entries that ask for every live entry of their keys."""
    return Select(spark, ["key_str", F.lit(None).cast("bigint").alias(WINDOW_START),
                          F.lit(None).cast("bigint").alias(WINDOW_END)])


# (records: key, kind, then any; the kind column's name; the state rows' kind) -> the records with
# their keys' live entries, partitioned as the state is (LiveStore.with_entries).
WithEntries = Callable[[DataFrame, str, int], DataFrame]


@dataclass(frozen=True)
class StateJoin:
    """A seeded state a batch joins where it lies (LiveStore.by_key, joined and with_entries at the
    batch's version and horizon; its partition count), in a batch that writes it through: the
    batch's lookups, merge and state write run in one task per partition."""

    by_key: ByKey
    joined: Joined
    joined_deleting: JoinedDeleting
    with_entries: WithEntries
    partitions: int


# One batch's step: (entries, state join or None while seeding, the batch's classified records
# (flags is_event, is_delete, is_late), has_deletes) -> its changes. A step filters the records it
# needs itself: events and tombstones taken as one filter of the records, not a union of two, read
# the cache once (a union's tasks are both sides' tasks).
Step = Callable[[Entries, StateJoin | None, DataFrame, bool], WindowedChanges]


def window_step(spark: SparkSession, store: StoreDefinition) -> Step:
    """A window store's step: its events' windows aggregated and merged with their entries (joined
    in place once the state is seeded), tombstones removing keys."""
    plan = WindowPlan(spark, store)
    is_applied, is_delete = F.col(IS_EVENT) & ~F.col(IS_LATE), F.col(IS_DELETE)
    applied_only, deletes_only, applied_or_deletes = Where(is_applied), Where(is_delete), Where(is_applied | is_delete)
    wanted = Select(spark, ["key_str", WINDOW_START, WINDOW_END])
    whole_keys = _whole_keys(spark)

    def step(entries: Entries, join: StateJoin | None, records: DataFrame, has_deletes: bool) -> WindowedChanges:
        # The state read asks for the windows the batch's events fall into, one lookup each, so it
        # costs what the batch touches, not what retention keeps; a key the batch deletes is read whole.
        if not has_deletes:  # most batches: no delete join, and nothing for deletes to remove
            contributions = plan.contributions(applied_only(records), None)
            if join is not None:
                return WindowedChanges(plan.joined_puts(contributions, join.by_key, join.joined))
            puts, _ = plan.changes(contributions, entries(wanted(contributions)), None)
            return WindowedChanges(puts)
        if join is not None:  # in place too: a deleted key's entries are found where they lie
            return WindowedChanges(plan.joined_changes(applied_or_deletes(records), join.by_key, join.joined_deleting),
                                   mixed=True)
        applied, deletes = applied_only(records), deletes_only(records)
        delete_offsets = deletes.groupBy("key_str").agg(F.max("offset").alias("delete_offset"),
                                                        F.max("partition").alias("delete_partition"))
        contributions = plan.contributions(applied, delete_offsets)
        state = entries(wanted(contributions).unionByName(whole_keys(deletes)))
        deleted_keys = delete_offsets.select(F.col("key_str").alias(KEY), "delete_offset", "delete_partition")
        puts, removed = plan.changes(contributions, state, deleted_keys.select(KEY))
        assert removed is not None
        removed = (removed.join(deleted_keys, KEY)
                   .select(KEY, WINDOW_START, WINDOW_END,
                           F.col("delete_partition").alias(SOURCE_PARTITION),
                           F.col("delete_offset").alias(SOURCE_OFFSET)))
        return WindowedChanges(puts, removed)

    return step


def session_step(spark: SparkSession, store: StoreDefinition) -> Step:
    """A session store's step: the live sessions of the keys its records touch, merged with the
    records in one sorted pass per partition (sessions.py)."""
    spec = store.session
    assert spec is not None
    fields = event_fields(store)
    # The batch's events and tombstones, one row each, in one select of one filter: an event with
    # its time, its thresholds and fields; a tombstone (is_delete) with nulls there.
    is_event, is_delete = F.col(IS_EVENT), F.col(IS_DELETE)
    in_batch = Where(is_event | is_delete)
    kept = ~is_delete
    late_below, retained_above = session_merge.thresholds(store, F.col(STREAM_TIME), session_store_time(spec))
    batch_records = Select(spark, [
        F.col("key_str").alias("key"), F.lit(session_merge.RECORD).alias("kind"), "partition", "offset",
        F.when(kept, F.col(store.event_time_field)).alias("ts"),
        F.when(kept, late_below).alias(session_merge.LATE_BELOW),
        F.when(kept, retained_above).alias(session_merge.RETAINED_ABOVE), is_delete.alias("is_delete"),
        *[F.when(kept, F.col(f)).alias(f) for f in fields if f != "ts"]])
    whole_keys = _whole_keys(spark)
    as_state = Select(spark, ["*", F.lit(session_merge.STATE).alias("kind")])
    is_put = F.col("kind") == session_merge.PUT
    is_removed, is_late = F.col("kind") == session_merge.DELETE, F.col("kind") == session_merge.LATE
    late_position = Select(spark, [F.col(SOURCE_PARTITION).alias("partition"), F.col(SOURCE_OFFSET).alias("offset")])
    marked = Select(spark, ["*", is_removed.alias(IS_DELETE)])  # a mixed frame's rows told apart
    sorted_for_merge = SortWithinPartitions(spark, ["key", "kind", "offset"])
    merge = session_merge.SessionMerge(spark, store)
    late_only, not_late, puts_only, removed_only = Where(is_late), Where(~is_late), Where(is_put), Where(is_removed)

    def step(entries: Entries, join: StateJoin | None, classified: DataFrame, has_deletes: bool) -> WindowedChanges:
        # has_deletes is not needed: the merge meets each key's deletes in offset order as it goes.
        # A session's bounds move as it merges: the batch reads every live session of the keys it
        # touches (a prefix scan each), where a join looks entries up by their bounds.
        seen_before = merge.late_rows()
        if join is not None:
            return in_place(join, classified, seen_before)
        touched = in_batch(classified)
        state = as_state(entries(whole_keys(touched)))
        merged_input = state.unionByName(batch_records(touched), allowMissingColumns=True)
        # Checkpointed, not cached: a seeding batch's merge reads the changelog, and Delta invalidates
        # every cached plan over a table it appends to, so a cached merge ran again after the changelog
        # append (for the late counts and dead letters). A local checkpoint cuts the plan off the table.
        partitions = int(classified.sparkSession.conf.get("spark.sql.shuffle.partitions"))
        out = merge(sorted_for_merge(merged_input.repartition(partitions, "key"))).localCheckpoint(eager=True)
        return WindowedChanges(puts_only(out), removed_only(out), late_position(late_only(out)),
                               lambda: merge.late_rows() > seen_before, (out,))

    def in_place(join: StateJoin, classified: DataFrame, seen_before: int) -> WindowedChanges:
        # The records are shuffled by key into the state's partitions once; each task reads its keys'
        # sessions, merges, and (in the batch's write) writes the state and the changelog's files.
        # No checkpoint: the merge runs inside the write job, and again only when it found late
        # records, for their dead letters (it reads the same state version, so it finds the same).
        # (batch_records starts with key and kind, as with_entries takes them.)
        with_state = join.with_entries(batch_records(in_batch(classified)), "kind", session_merge.STATE)
        out = merge(sorted_for_merge(with_state), join.partitions)
        return WindowedChanges(marked(not_late(out)), None, late_position(late_only(out)),
                               lambda: merge.late_rows() > seen_before, mixed=True)

    return step


def step_for(spark: SparkSession, store: StoreDefinition) -> Step:
    """The batch step of the store's kind, built once per run."""
    return (session_step if store.session else window_step)(spark, store)
