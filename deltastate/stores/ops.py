"""The aggregation ops a store definition may name, declared once.

An op is two facts: what one event contributes (1 for `count`, the event's field for the others)
and how two partial values combine, earlier then later (`add`, `min`, `max`, `latest`; `mean` keeps
a sum and divides by the entry's event count). Every fold reads this table:

- the key-value engine's fold (jvm/src/io/deltastate/ResettableFold.java) and the session merge
  (jvm/src/io/deltastate/SessionMerge.java) are given each slot's combine, not the op's name, so the
  JVM knows the combines and nothing about ops;
- the Python folds (`latest` reads in query/latest.py, the LRU store's fold) call `combine` below;
- the window engine's batch SQL takes `spark_partial` and `spark_merge` below.

A missing value (a null field) is absent, never zero: it leaves the other side as it is. `latest`
keeps the later side's value when it has one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import Column

ADD, MIN, MAX, LATEST, MEAN = "add", "min", "max", "latest", "mean"
# The combines the key-value engine's fold implements (ResettableFold.java): mean is windowed-only.
FOLD_COMBINES = (ADD, MIN, MAX, LATEST)


@dataclass(frozen=True)
class Op:
    name: str
    reads_field: bool  # False: every event contributes 1 (count)
    combine: str  # ADD | MIN | MAX | LATEST | MEAN
    windowed_only: bool = False  # needs the entry's event count, which only window and session entries keep


OPS: dict[str, Op] = {op.name: op for op in (
    Op("count", reads_field=False, combine=ADD),
    Op("sum", reads_field=True, combine=ADD),
    Op("min", reads_field=True, combine=MIN),
    Op("max", reads_field=True, combine=MAX),
    Op("last", reads_field=True, combine=LATEST),
    Op("avg", reads_field=True, combine=MEAN, windowed_only=True),
)}
FOLD_OPS = tuple(OPS)
WINDOWED_ONLY_OPS = tuple(name for name, op in OPS.items() if op.windowed_only)


def op(name: str) -> Op:
    try:
        return OPS[name]
    except KeyError:
        raise ValueError(f"unknown aggregation op {name!r} (ops: {', '.join(FOLD_OPS)})") from None


def contribution(name: str, field_value: Any) -> Any:
    """What one event adds to a partial: 1 for an op that reads no field, else the field's value."""
    return field_value if op(name).reads_field else 1


def combine(kind: str, earlier: Any, later: Any) -> Any:
    """Two partial values of one slot, in order; None is an absent value. (MEAN partials are sums:
    they combine as ADD, and the caller divides by the entry's event count.)"""
    if kind == LATEST:
        return earlier if later is None else later
    if earlier is None:
        return later
    if later is None:
        return earlier
    if kind in (ADD, MEAN):
        return earlier + later
    if kind == MIN:
        return min(earlier, later)
    if kind == MAX:
        return max(earlier, later)
    raise ValueError(f"unknown combine {kind!r}")


def spark_contribution(name: str, field: str | None, spark_type: str) -> Column:
    """An event's contribution as a Spark column (the key-value fold's argument)."""
    from pyspark.sql import functions as F

    return F.col(f"`{field}`").cast(spark_type) if op(name).reads_field else F.lit(1).cast("bigint")


def spark_partial(name: str, field: str | None, order: Column) -> Column:
    """One batch's partial of the op over a group of events (`order`: their position, for LATEST)."""
    from pyspark.sql import functions as F

    the_op = op(name)
    if not the_op.reads_field:
        return F.count(F.lit(1))
    value = F.col(field)
    if the_op.combine in (ADD, MEAN):
        return F.sum(value)
    if the_op.combine == MIN:
        return F.min(value)
    if the_op.combine == MAX:
        return F.max(value)
    # The value of the latest event that has one: rows without a value give max_by no position.
    return F.max_by(value, F.when(value.isNotNull(), order))


def spark_merge(name: str, earlier: Column, later: Column) -> Column:
    """combine() as a Spark column, for an entry's held value (earlier) and a batch partial (later).
    MEAN merges its sums; the window engine divides by the events."""
    from pyspark.sql import functions as F

    kind = op(name).combine
    if kind in (ADD, MEAN):
        return F.coalesce(earlier + later, earlier, later)
    if kind == MIN:
        return F.least(earlier, later)  # least/greatest skip nulls
    if kind == MAX:
        return F.greatest(earlier, later)
    return F.coalesce(later, earlier)
