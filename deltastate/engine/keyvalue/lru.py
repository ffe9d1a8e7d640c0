"""The streaming plan of an LRU key-value store (`max_entries: N`, Kafka Streams' Stores.lruMap).

The store keeps at most N keys. Each source partition owns its share (StoreDefinition.lru_capacity)
and evicts on its own: a key lives in one partition, so a partition's records, taken in offset order
across micro-batches, decide its keys completely. A record for a key the partition does not hold,
when the partition is full, first evicts the partition's least recently updated key: the key whose
latest applied record has the lowest offset. An evicted key forgets its state; its next record
starts it afresh. Every eviction is a changelog delete with reason 'evicted', so snapshots, reads
and restore see exactly the keys the running state holds.

A partition's keys need one ordered view, which Spark's per-key aggregation cannot give, so the
plan groups by source partition (applyInPandasWithState) and keeps the partition's whole map, in
recency order, as that group's state. The same group keeps the partition's audit totals, and the
output has the shape of plan.store_stream's, so the key-value batch writer serves both plans.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout

from deltastate.changelog.layout import (
    APPLIED,
    AUDIT_COUNTS,
    DEAD_LETTERED,
    DELETE_REASON,
    EVENT_TIME,
    REASON_EVICTED,
    RECORDS_IN,
    SOURCE_OFFSET,
    SOURCE_PARTITION,
    TOMBSTONES,
)
from deltastate.engine.keyvalue.fold import EVENT_TIME_SLOT, FoldSpec
from deltastate.engine.keyvalue.plan import AUDIT_COLUMNS, AUDIT_PARTITION
from deltastate.stores.definition import StoreDefinition
from deltastate.stores.ops import MAX, combine, op, spark_contribution

_STATE_SCHEMA = "entries string, totals string"
_TOTALS = AUDIT_COUNTS  # their names key the totals each partition keeps in its state


def _slot_combines(store: StoreDefinition, fold: FoldSpec) -> list[tuple[str, str]]:
    """(combine, value type) per fold slot (stores/ops.py): the store's aggregations, then the event
    time (max)."""
    slots = [(op(a.op).combine, store.value_field(a.target).type) for a in store.aggregations]
    assert fold.slots[-1] == EVENT_TIME_SLOT and len(fold.slots) == len(slots) + 1
    return [*slots, (MAX, "long")]


def _input_rows(classified: DataFrame, store: StoreDefinition, seed: DataFrame | None) -> DataFrame:
    """One row per record (and per restored key): partition, offset, flags, and per slot a value
    and a null flag. Longs arrive without nulls (coalesced, flagged apart) so pandas keeps them int64."""
    valid = F.col("reason").isNull()
    slots: list = []
    for agg in store.aggregations:
        value = spark_contribution(agg.op, agg.source_field, store.value_field(agg.target).spark_type)
        slots += [value, value.isNull()]
    event_ms = F.col(store.event_time_field).cast("bigint")
    slots += [event_ms, event_ms.isNull()]
    names = [f"{prefix}{i}" for i in range(len(slots) // 2) for prefix in ("v", "z")]
    rows = classified.select(
        F.col("partition").cast("int").alias("partition"), F.col("offset"),
        F.unix_micros("kafka_timestamp").alias("kafka_us"), F.lit(False).alias("seed"),
        F.when(valid, F.col("key_str")).alias("store_key"), valid.alias("valid"), F.col("is_tombstone"),
        *[_fill(c, store, i // 2).alias(n) if n.startswith("v") else c.alias(n)
          for i, (c, n) in enumerate(zip(slots, names, strict=True))])
    if seed is None:
        return rows
    # A restored key: its stored values as one partial at its changelog position, before every event.
    seeded: list = []
    for agg in store.aggregations:
        value = F.col(agg.target).cast(store.value_field(agg.target).spark_type)
        seeded += [value, value.isNull()]
    seed_ms = F.unix_millis(EVENT_TIME).cast("bigint")
    seeded += [seed_ms, seed_ms.isNull()]
    return rows.unionByName(seed.select(
        F.col(SOURCE_PARTITION).cast("int").alias("partition"), F.col(SOURCE_OFFSET).alias("offset"),
        F.lit(None).cast("bigint").alias("kafka_us"), F.lit(True).alias("seed"), F.col("key").alias("store_key"),
        F.lit(True).alias("valid"), F.lit(False).alias("is_tombstone"),
        *[_fill(c, store, i // 2).alias(n) if n.startswith("v") else c.alias(n)
          for i, (c, n) in enumerate(zip(seeded, names, strict=True))]))


def _fill(value, store: StoreDefinition, slot: int):
    """A long slot's nulls as 0 (its null flag says which); other types keep their nulls."""
    types = [store.value_field(a.target).type for a in store.aggregations] + ["long"]
    return F.coalesce(value, F.lit(0).cast("bigint")) if types[slot] == "long" else value


def _output_schema(store: StoreDefinition) -> str:
    values = ", ".join(f"r{i} {store.value_field(a.target).spark_type}" for i, a in enumerate(store.aggregations))
    return (f"store_key string, {AUDIT_PARTITION} int, reset_pos bigint, last_pos bigint, n bigint, {values}, "
            f"r{len(store.aggregations)} bigint, source_partition int, kafka_us bigint, "
            + ", ".join(f"{c} bigint" for c in AUDIT_COLUMNS) + f", {DELETE_REASON} string")


def lru_stream(classified: DataFrame, store: StoreDefinition, fold: FoldSpec,
               seed: DataFrame | None = None) -> DataFrame:
    """plan.store_stream's output for an LRU store: per changed key its fold result (n = 0 for a
    delete) and the delete's reason; per partition of the batch its audit running totals."""
    ops = _slot_combines(store, fold)
    updates = _input_rows(classified, store, seed).groupBy("partition").applyInPandasWithState(
        _partition_update(store, ops), _output_schema(store), _STATE_SCHEMA, "update", GroupStateTimeout.NoTimeout)
    return updates.select(
        "store_key", AUDIT_PARTITION,
        F.struct("reset_pos", "last_pos", "n", *[f"r{i}" for i in range(len(ops))]).alias("fold"),
        SOURCE_PARTITION, F.timestamp_micros("kafka_us").alias("kafka_timestamp"), *AUDIT_COLUMNS, DELETE_REASON)


def _partition_update(store: StoreDefinition, ops: list[tuple[str, str]]):
    """The group function: one partition's batch through its LRU map, in offset order."""
    value_types = [t for _, t in ops]

    def update(key: tuple, frames: Iterator[pd.DataFrame], state: GroupState) -> Iterator[pd.DataFrame]:
        partition = int(key[0])
        capacity = store.lru_capacity(partition)
        entries: OrderedDict[str, list] = OrderedDict()  # key -> [last_pos, n, slots...], oldest first
        totals: dict[str, Any] = {name: 0 for name in _TOTALS} | {"lo": None, "hi": None, "stream_time": None}
        if state.exists:
            held, held_totals = state.get
            entries = OrderedDict((k, v) for k, v in json.loads(held))
            totals = json.loads(held_totals)
        batch = pd.concat(list(frames), ignore_index=True)
        # Restored keys first (their positions precede every event), then records in offset order.
        batch = batch.sort_values(["seed", "offset"], ascending=[False, True], kind="stable")
        changed: dict[str, tuple[list | None, int, int | None, str | None]] = {}

        def evict_to(room: int, pos: int, kafka_us: int | None) -> None:
            while len(entries) > room:
                victim, _ = entries.popitem(last=False)
                changed[victim] = (None, pos, kafka_us, REASON_EVICTED)

        slot_count = len(ops)
        for row in batch.itertuples(index=False):
            pos, kafka_us = int(row.offset), None if pd.isna(row.kafka_us) else int(row.kafka_us)
            if not row.seed:
                totals[RECORDS_IN] += 1
                totals["lo"] = pos if totals["lo"] is None else min(totals["lo"], pos)
                totals["hi"] = pos if totals["hi"] is None else max(totals["hi"], pos)
                if not row.valid:
                    totals[DEAD_LETTERED] += 1
                    continue
                totals[APPLIED] += 1
            k = row.store_key
            values = [None if getattr(row, f"z{i}") else _plain(getattr(row, f"v{i}"), value_types[i])
                      for i in range(slot_count)]
            if row.is_tombstone:
                totals[TOMBSTONES] += 1
                entries.pop(k, None)
                changed[k] = (None, pos, kafka_us, None)
                continue
            if not row.seed and values[-1] is not None:
                totals["stream_time"] = max(values[-1], totals["stream_time"] or values[-1])
            entry = entries.pop(k, None)
            if entry is None:
                evict_to(capacity - 1, pos, kafka_us)
                entry = [pos, 0] + [None] * slot_count
            entry[0], entry[1] = pos, entry[1] + 1
            for i, (kind, _) in enumerate(ops):
                entry[2 + i] = combine(kind, entry[2 + i], values[i])
            entries[k] = entry  # to the newest end
            if not row.seed:
                changed[k] = (entry, pos, kafka_us, None)
        state.update((json.dumps(list(entries.items())), json.dumps(totals)))
        yield _output(partition, changed, totals, value_types)

    return update


def _plain(value: Any, type_: str) -> Any:
    """A pandas scalar as a JSON-able Python value."""
    if type_ == "long":
        return int(value)
    if type_ == "double":
        return float(value)
    return None if value is None else str(value)


def _output(partition: int, changed: dict, totals: dict[str, Any], value_types: list[str]) -> pd.DataFrame:
    rows = []
    for k, (entry, pos, kafka_us, reason) in changed.items():
        alive = entry is not None
        row = {"store_key": k, AUDIT_PARTITION: None, "reset_pos": -1, "last_pos": entry[0] if alive else pos,
               "n": entry[1] if alive else 0, SOURCE_PARTITION: partition, "kafka_us": kafka_us,
               DELETE_REASON: reason}
        row |= {f"r{i}": entry[2 + i] if alive else None for i in range(len(value_types))}
        rows.append(row)
    if totals[RECORDS_IN]:
        rows.append({"store_key": None, AUDIT_PARTITION: partition, "audit_lo": totals["lo"],
                     "audit_hi": totals["hi"], "audit_stream_time": totals["stream_time"],
                     **{name: totals[name] for name in _TOTALS}})
    slots = [f"r{i}" for i in range(len(value_types))]
    frame = pd.DataFrame(rows, columns=["store_key", AUDIT_PARTITION, "reset_pos", "last_pos", "n", *slots,
                                        SOURCE_PARTITION, "kafka_us", *AUDIT_COLUMNS, DELETE_REASON])
    # Integer columns as nullable Int64: a float column would round values past 2**53.
    integers = [AUDIT_PARTITION, "reset_pos", "last_pos", "n", SOURCE_PARTITION, "kafka_us", *AUDIT_COLUMNS,
                *(s for s, t in zip(slots, value_types, strict=True) if t == "long")]
    return frame.astype({c: "Int64" for c in integers} | {s: "float64" for s, t in zip(slots, value_types, strict=True)
                                                          if t == "double"})
