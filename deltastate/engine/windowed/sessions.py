"""One micro-batch of a session store: Kafka Streams' session merging, record by record, in the JVM.

Spark's session_window has no update mode and Python stateful processors pay ~1 ms per key per
batch, so the batch's records and the live sessions of the keys they touch are brought together with
batch SQL and merged in one sorted pass per Spark partition (io.deltastate.SessionMerge): per record
work in the task that holds the rows, no per-key set-up and no hand-off to a Python worker. The rules
(KStreamSessionWindowAggregate and the session store's findSessions):
  - an event at ts merges every session of its key with end >= ts - gap and start <= ts + gap that
    the store still retains at the stream time before the event (changelog/rules.py
    retention_horizon, carried on the record as RETAINED_ABOVE);
  - it is late when the merged session's end is below the close time (lateness.py
    session_close_time, carried as LATE_BELOW; nothing changes then);
  - a delete removes every session of the key;
  - superseded sessions get tombstones, so no two sessions of a key overlap in the latest view.
The thresholds are computed here as Spark columns by those rules, so the JVM only compares; how
values combine comes from the op table (stores/ops.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession

from deltastate.changelog.layout import REASON_LATE, SOURCE_OFFSET, SOURCE_PARTITION
from deltastate.changelog.rules import retention_horizon
from deltastate.engine.windowed.lateness import session_close_time
from deltastate.stores.definition import Aggregation, StoreDefinition
from deltastate.stores.ops import op

STATE, RECORD = 0, 1  # row kinds of the merge input; state rows sort first within a key
LATE = REASON_LATE  # the output row kind of a record too late for any session: a dead letter by that reason
PUT, DELETE = "put", "delete"
LATE_BELOW = "late_below"  # a record's close time: late when its merged session ends below it
RETAINED_ABOVE = "retained_above"  # a record's retention horizon: it reaches sessions ending above it


def thresholds(store: StoreDefinition, stream_time: Column, store_time: Column) -> list[Column]:
    """A record's LATE_BELOW and RETAINED_ABOVE columns, from the partition's stream time with the
    record and the session store's time before it (records.py session_store_time)."""
    spec = store.session
    assert spec is not None
    return [session_close_time(stream_time, spec.gap_ms, spec.grace_ms).alias(LATE_BELOW),
            retention_horizon(spec, store_time).alias(RETAINED_ABOVE)]


@dataclass(frozen=True)
class MergeShape:
    """What the JVM merge is told about a store: its aggregations, each one's value type (long,
    double or string) and the session gap."""

    aggregations: tuple[Aggregation, ...]
    value_types: tuple[str, ...]
    gap_ms: int

    @classmethod
    def of(cls, store: StoreDefinition) -> MergeShape:
        assert store.session is not None
        return cls(store.aggregations, tuple(store.value_field(a.target).type for a in store.aggregations),
                   store.session.gap_ms)

    def output_ddl(self) -> str:
        """The merge's output: kind (put, delete or LATE), key, bounds, the aggregated fields only
        (derived ones are computed from these as the changelog is written), events, source position,
        event time."""
        spark = {"long": "bigint", "double": "double", "string": "string"}
        columns = [("kind", "string"), ("key", "string"), ("window_start", "bigint"), ("window_end", "bigint"),
                   *[(a.target, spark[t]) for a, t in zip(self.aggregations, self.value_types, strict=True)],
                   ("events", "bigint"), (SOURCE_PARTITION, "int"), (SOURCE_OFFSET, "bigint"), ("event_ms", "bigint")]
        return ", ".join(f"`{name}` {kind}" for name, kind in columns)

    def output_columns(self) -> list[str]:
        return [c.split("`")[1] for c in self.output_ddl().split(", ")]

    def jvm_merge(self, spark: SparkSession, input_schema: Any) -> Any:
        """An io.deltastate.SessionMerge for rows of input_schema (a JVM StructType)."""
        aggs = self.aggregations
        return spark._jvm.io.deltastate.SessionMerge.of(
            input_schema, ",".join(a.target for a in aggs),
            ",".join(a.source_field if op(a.op).reads_field and a.source_field else "" for a in aggs),
            ",".join(op(a.op).combine for a in aggs), self.output_ddl(), self.gap_ms, LATE)


class SessionMerge:
    """The merge step of a run: rows sorted by (key, kind, offset) -> put, delete and late rows
    (io.deltastate.SessionMerge). Late rows are counted as the merge runs (`late_rows`), so a batch
    that found none asks no job for them."""

    def __init__(self, spark: SparkSession, store: StoreDefinition) -> None:
        self._spark = spark
        self._shape = MergeShape.of(store)
        self._merges: tuple[str, Any] | None = None  # (input schema's JSON, its JVM merge)
        self._late = spark._jsc.sc().longAccumulator(f"{store.name} late session records")

    def __call__(self, sorted_rows: DataFrame, keyed_partitions: int = 0) -> DataFrame:
        """keyed_partitions: sorted_rows lie in the state's partitions (LiveStore.with_entries), and
        the output is declared so, so the batch's state write runs in the same tasks."""
        jdf = sorted_rows._jdf
        schema = jdf.schema()
        shape = schema.json()
        if self._merges is None or self._merges[0] != shape:
            self._merges = shape, self._shape.jvm_merge(self._spark, schema)
        return DataFrame(self._merges[1].apply(jdf, self._late, keyed_partitions), self._spark)

    def late_rows(self) -> int:
        """Late rows the run's merges have emitted so far (a merge run again counts them again)."""
        return int(self._late.value())
