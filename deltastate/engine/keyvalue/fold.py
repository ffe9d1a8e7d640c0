"""The store's aggregation as one call of deltastate's resettable fold (jvm/src/.../ResettableFold).

Spark's built-in aggregates cannot forget what came before a tombstone; the fold keeps, per key, the
aggregates since the key's latest tombstone as mergeable partials ordered by source offset, so the
whole state lives in Spark's native streaming aggregation and its RocksDB state store.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F

from deltastate.changelog.layout import EVENT_TIME
from deltastate.stores.definition import Aggregation, StoreDefinition
from deltastate.stores.ops import MAX, op, spark_contribution

EVENT_TIME_SLOT = "__event_time"


@dataclass(frozen=True)
class FoldSpec:
    function: str
    slots: tuple[str, ...]  # result field per op slot: value columns, then the event-time slot


def _fold_name(store: StoreDefinition) -> str:
    return f"deltastate_fold_{store.name}"


def register_fold(spark: SparkSession, store: StoreDefinition) -> FoldSpec:
    """Registers the store's fold under a SQL name; returns how to read its result. The fold is given
    each slot's combine from the op table (stores/ops.py), not the op's name."""
    combines, types, slots = [], [], []
    for agg in store.aggregations:
        combines.append(op(agg.op).combine)
        types.append(store.value_field(agg.target).type)
        slots.append(agg.target)
    combines.append(MAX)
    types.append("long")
    slots.append(EVENT_TIME_SLOT)
    name = _fold_name(store)
    spark._jvm.io.deltastate.Udafs.registerFold(spark._jsparkSession, name, ",".join(combines), ",".join(types))
    return FoldSpec(function=name, slots=tuple(slots))


# The fold's argument columns, projected before the aggregation so that events and restored state
# rows (seeds) can be unioned into one input: position, reset flag, one value per slot.
POS, RESET = "__fold_pos", "__fold_reset"
SEED_POS = -1  # a restored state sits before every source offset (offsets start at 0)


def _slot_column(i: int) -> str:
    return f"__fold_v{i}"


def arg_columns(spec: FoldSpec) -> list[str]:
    return [POS, RESET, *(_slot_column(i) for i in range(len(spec.slots)))]


def event_args(store: StoreDefinition) -> list[Column]:
    """The fold's arguments for classified records. Dead letters pass a null position, which the
    fold ignores (filtering them out instead lets Spark push the filter below the parse and
    evaluate the whole classification again inside it)."""
    args = [F.expr("CASE WHEN reason IS NULL THEN offset END").alias(POS), F.col("is_tombstone").alias(RESET)]
    for i, agg in enumerate(store.aggregations):
        # count sums weights: 1 per applied event, and a restored key's count (seed_args).
        args.append(_contribution(store, agg).alias(_slot_column(i)))
    args.append(F.expr(f"cast(`{store.event_time_field}` as bigint)").alias(_slot_column(len(store.aggregations))))
    return args


def seed_args(store: StoreDefinition) -> list[Column]:
    """The fold's arguments for rows of a restored state (changelog.reader.state_columns): one row
    per key standing for everything the key saw, so each slot takes the stored value (count's
    weight is the stored count) and the event-time slot the stored event time."""
    args = [F.lit(SEED_POS).cast("bigint").alias(POS), F.lit(False).alias(RESET)]
    for i, agg in enumerate(store.aggregations):
        wanted = store.value_field(agg.target).spark_type
        args.append(F.col(agg.target).cast(wanted).alias(_slot_column(i)))
    args.append(F.unix_millis(F.col(EVENT_TIME)).cast("bigint").alias(_slot_column(len(store.aggregations))))
    return args


def fold_over_args(spec: FoldSpec) -> Column:
    """The fold over columns projected with event_args / seed_args."""
    return F.expr(f"{spec.function}({', '.join(arg_columns(spec))})")


def fold_call(store: StoreDefinition, spec: FoldSpec) -> Column:
    """fold(pos, reset, v0, v1, ...) directly over classified records (no projection first)."""
    return F.call_function(spec.function, F.expr("CASE WHEN reason IS NULL THEN offset END"), F.col("is_tombstone"),
                           *(_contribution(store, agg) for agg in store.aggregations),
                           F.col(f"`{store.event_time_field}`").cast("bigint"))


def _contribution(store: StoreDefinition, agg: Aggregation) -> Column:
    return spark_contribution(agg.op, agg.source_field, store.value_field(agg.target).spark_type)
