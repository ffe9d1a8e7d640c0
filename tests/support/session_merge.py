"""The engine's session merge (io.deltastate.SessionMerge) called on plain rows, without a Spark job:
one key's (or one batch's keys') live sessions and records in, its puts, deletes and late offsets
out. The rows are built here as the engine's batch builds them: each record carries the close time
and retention horizon that deltastate's rules give for its stream times."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from deltastate.changelog.rules import retention_horizon
from deltastate.engine.windowed.lateness import session_close_time
from deltastate.engine.windowed.sessions import DELETE, LATE, PUT, RECORD, STATE, MergeShape
from deltastate.stores.definition import Aggregation, SessionSpec


@dataclass(frozen=True)
class Put:
    start: int
    end: int
    events: int
    values: dict[str, Any]
    partition: int
    offset: int


@dataclass
class KeyResult:
    puts: list[Put] = field(default_factory=list)
    deleted: list[tuple[int, int, int, int]] = field(default_factory=list)  # start, end, partition, offset
    late_offsets: list[int] = field(default_factory=list)


def state_row(start: int, end: int, values: dict[str, Any], events: int, partition: int, offset: int) -> dict:
    return {"window_start": start, "window_end": end, **values, "events": events,
            "source_partition": partition, "source_offset": offset}


class Merge:
    """The merge for aggregations (their value types: long, double or string) and a session spec.
    Event fields: every aggregation's source besides ts, strings unless named in field_types."""

    def __init__(self, spark, aggs: tuple[Aggregation, ...], spec: SessionSpec, value_types: dict[str, str],
                 field_types: dict[str, str] | None = None) -> None:
        spark_type = {"long": "bigint", "double": "double", "string": "string"}
        self.spec = spec
        self.shape = MergeShape(aggs, tuple(value_types[a.target] for a in aggs), spec.gap_ms)
        self.fields = sorted({a.source_field for a in aggs if a.source_field} - {"ts"})
        types = field_types or {}
        self.columns = ["key", "kind", "partition", "offset", "ts", "late_below", "retained_above", "is_delete",
                        *self.fields, "window_start", "window_end", *[a.target for a in aggs], "events",
                        "source_partition", "source_offset"]
        ddl = ["key string", "kind int", "partition int", "offset bigint", "ts bigint", "late_below bigint",
               "retained_above bigint", "is_delete boolean", *[f"`{f}` {types.get(f, 'string')}" for f in self.fields],
               "window_start bigint", "window_end bigint",
               *[f"`{a.target}` {spark_type[value_types[a.target]]}" for a in aggs],
               "events bigint", "source_partition int", "source_offset bigint"]
        self._jmerge = self.shape.jvm_merge(spark, spark._jvm.org.apache.spark.sql.types.StructType.fromDDL(", ".join(ddl)))
        self._output = self.shape.output_columns()

    def _record(self, key: str, r: dict) -> list:
        """A record (offset, partition, is_delete, ts, stream_time: the partition's with the record,
        store_time: the partition's before it, and fields) as the engine's batch_records row."""
        deleting = r["is_delete"]
        late_below = None if deleting else session_close_time(r["stream_time"], self.spec.gap_ms, self.spec.grace_ms)
        store_time = r.get("store_time")
        retained_above = None if deleting or store_time is None else retention_horizon(self.spec, store_time)
        row = {"key": key, "kind": RECORD, "partition": r["partition"], "offset": r["offset"],
               "ts": None if deleting else r["ts"], "late_below": late_below, "retained_above": retained_above,
               "is_delete": deleting, **{f: None if deleting else r.get(f) for f in self.fields}}
        return [row.get(c) for c in self.columns]

    def _state(self, key: str, s: dict) -> list:
        row = {"key": key, "kind": STATE, **s}
        return [row.get(c) for c in self.columns]

    def batch(self, by_key: dict[str, tuple[list[dict], list[dict]]]) -> dict[str, KeyResult]:
        """{key: (state rows, records in offset order)} -> {key: its result}, in one call."""
        rows = []
        for key in sorted(by_key):
            state, records = by_key[key]
            rows += [self._state(key, s) for s in state] + [self._record(key, r) for r in records]
        results = {key: KeyResult() for key in by_key}
        for out in json.loads(self._jmerge.mergeJson(json.dumps(rows))):
            row = dict(zip(self._output, out))
            result = results[row["key"]]
            if row["kind"] == PUT:
                values = {a.target: row[a.target] for a in self.shape.aggregations}
                result.puts.append(Put(row["window_start"], row["window_end"], row["events"], values,
                                       row["source_partition"], row["source_offset"]))
            elif row["kind"] == DELETE:
                result.deleted.append((row["window_start"], row["window_end"], row["source_partition"],
                                       row["source_offset"]))
            else:
                assert row["kind"] == LATE, row
                result.late_offsets.append(row["source_offset"])
        return results

    def key(self, state: list[dict], records: list[dict]) -> KeyResult:
        return self.batch({"k": (state, records)})["k"]
