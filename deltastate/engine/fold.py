"""The store's aggregation as one call of deltastate's resettable fold (jvm/src/.../ResettableFold).

Spark's built-in aggregates cannot forget what came before a tombstone; the fold keeps, per key, the
aggregates since the key's latest tombstone as mergeable partials ordered by source offset, so the
whole state lives in Spark's native streaming aggregation and its RocksDB state store.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F

from deltastate.stores.definition import StoreDefinition

EVENT_TIME_SLOT = "__event_time"


@dataclass(frozen=True)
class FoldSpec:
    function: str
    slots: tuple[str, ...]  # result field per op slot: value columns, then the event-time slot


def _fold_name(store: StoreDefinition) -> str:
    return f"deltastate_fold_{store.name}"


def register_fold(spark: SparkSession, store: StoreDefinition) -> FoldSpec:
    """Registers the store's fold under a SQL name; returns how to read its result."""
    ops, types, slots = [], [], []
    for agg in store.aggregations:
        ops.append(agg.op)
        types.append(store.value_field(agg.target).type)
        slots.append(agg.target)
    ops.append("max")
    types.append("long")
    slots.append(EVENT_TIME_SLOT)
    name = _fold_name(store)
    spark._jvm.io.deltastate.Udafs.registerFold(spark._jsparkSession, name, ",".join(ops), ",".join(types))
    return FoldSpec(function=name, slots=tuple(slots))


def fold_call(store: StoreDefinition, spec: FoldSpec) -> Column:
    """fold(pos, reset, v0, v1, ...) over classified records; dead letters pass a null position, which
    the fold ignores (filtering them out instead lets Spark push the filter below the parse and
    evaluate the whole classification again inside it)."""
    args = ["CASE WHEN reason IS NULL THEN offset END", "is_tombstone"]
    for agg in store.aggregations:
        wanted = store.value_field(agg.target).spark_type
        # count ignores its value but needs a non-null one for each applied event.
        args.append("cast(1 as bigint)" if agg.op == "count" else f"cast(`{agg.source_field}` as {wanted})")
    args.append(f"cast(`{store.event_time_field}` as bigint)")
    return F.expr(f"{spec.function}({', '.join(args)})")
