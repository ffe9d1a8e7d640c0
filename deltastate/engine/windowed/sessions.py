"""One micro-batch of a session store: Kafka Streams' session merging, record by record.

Spark's session_window has no update mode and Python stateful processors pay ~1 ms per key per
batch, so the batch's records and the live sessions of the keys they touch are brought together with
batch SQL and merged here in one sorted pass per Spark partition (mapInArrow): plain Python per
record, no per-key set-up. The rules (KStreamSessionWindowAggregate and the session store's
findSessions; the comparisons live in lateness.py and changelog/rules.py):
  - an event at ts merges every session of its key with end >= ts - gap and start <= ts + gap that
    the store still retains at the stream time before the event;
  - it is late when the merged session's end < stream time - grace - gap (nothing changes then);
  - a delete removes every session of the key;
  - superseded sessions get tombstones, so no two sessions of a key overlap in the latest view.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from deltastate.changelog.layout import REASON_LATE, SOURCE_OFFSET, SOURCE_PARTITION
from deltastate.changelog.rules import is_retained
from deltastate.engine.windowed.lateness import session_late
from deltastate.stores.definition import Aggregation, SessionSpec, StoreDefinition
from deltastate.stores.ops import MEAN, combine, contribution, op

STATE, RECORD = 0, 1  # row kinds of the merge input; state rows sort first within a key
LATE = REASON_LATE  # the output row kind of a record too late for any session: a dead letter by that reason


@dataclass
class Session:
    start: int
    end: int
    events: int
    values: dict[str, Any]
    sums: dict[str, float]  # running sums behind avg values
    partition: int
    offset: int
    event_ms: int
    dirty: bool = False


@dataclass
class KeyResult:
    puts: list[Session] = field(default_factory=list)
    deleted: list[tuple[int, int, int, int]] = field(default_factory=list)  # start, end, partition, offset
    late_offsets: list[int] = field(default_factory=list)


def _event_folder(aggs: tuple[Aggregation, ...]) -> Callable[[Session, dict[str, Any]], None]:
    """fold(session, record): the record's event folded into the session's values by the op table
    (stores/ops.py; avg keeps its sum), each aggregation's combine looked up once rather than per event."""
    steps = [(a.target, a.source_field, a.op, op(a.op).combine) for a in aggs if op(a.op).combine != MEAN]
    averaged = [(a.target, a.source_field) for a in aggs if op(a.op).combine == MEAN]

    def fold(session: Session, record: dict[str, Any]) -> None:
        values = session.values
        for target, source, name, kind in steps:
            values[target] = combine(kind, values.get(target),
                                     contribution(name, None if source is None else record[source]))
        for target, source in averaged:
            session.sums[target] = combine(MEAN, session.sums.get(target), record[source]) or 0.0

    return fold


def _merge_into(aggs: tuple[Aggregation, ...], into: Session, other: Session) -> None:
    # `other` is the later part when it holds the higher offset: the order `latest` needs.
    later = other.offset > into.offset
    for a in aggs:
        kind = op(a.op).combine
        if kind == MEAN:
            into.sums[a.target] = combine(MEAN, into.sums.get(a.target), other.sums.get(a.target)) or 0.0
            continue
        x, y = into.values.get(a.target), other.values.get(a.target)
        into.values[a.target] = combine(kind, x, y) if later else combine(kind, y, x)
    into.start, into.end = min(into.start, other.start), max(into.end, other.end)
    into.events += other.events
    into.partition, into.offset = max(into.partition, other.partition), max(into.offset, other.offset)
    into.event_ms = max(into.event_ms, other.event_ms)


def _copy(s: Session) -> Session:
    return Session(s.start, s.end, s.events, dict(s.values), dict(s.sums), s.partition, s.offset, s.event_ms, True)


def process_key(aggs: tuple[Aggregation, ...], spec: SessionSpec, state: list[Session],
                records: list[dict[str, Any]]) -> KeyResult:
    """Applies one key's records (in offset order; each has offset, partition, ts, stream_time (the
    partition's, the record included), store_time (the partition's before the record), is_delete
    and the event fields) to its live sessions from the state. State sessions are never modified: a
    session this batch changes is a new (dirty) one, which later records of the batch may update in
    place."""
    gap = spec.gap_ms
    sessions = list(state)
    # Sessions past retention can never merge again (store time only grows along a partition):
    # set aside once the list doubles, so that a key with a long history is not scanned per event.
    retired: list[Session] = []
    limit = max(8, 2 * len(sessions))
    result = KeyResult()
    fold_event = _event_folder(aggs)
    for r in records:
        if r["is_delete"]:
            sessions, retired = [], []
            continue
        ts, before = r["ts"], r["store_time"]
        if len(sessions) > limit:
            retired += [s for s in sessions if not is_retained(spec, s.start, s.end, before)]
            sessions = [s for s in sessions if is_retained(spec, s.start, s.end, before)]
            limit = max(8, 2 * len(sessions))
        overlapping = [s for s in sessions if s.end >= ts - gap and s.start <= ts + gap
                       and is_retained(spec, s.start, s.end, before)]
        merged_end = max([ts, *[s.end for s in overlapping]])
        if session_late(merged_end, r["stream_time"], gap, spec.grace_ms):
            result.late_offsets.append(r["offset"])
            continue
        if len(overlapping) == 1:
            # The common case: the event joins one session. Updating it in place gives what the
            # general merge below does (the event folded last), without a new session per event.
            one = overlapping[0]
            merged = one if one.dirty else _copy(one)
            if merged is not one:
                sessions = [merged if s is one else s for s in sessions]
        else:
            merged = Session(ts, ts, 0, {}, {}, r["partition"], r["offset"], ts, dirty=True)
            for s in overlapping:
                _merge_into(aggs, merged, s)
            sessions = [s for s in sessions if not any(s is o for o in overlapping)] + [merged]
        # The event itself is the most recent: fold it last so `last` takes its value.
        merged.start, merged.end = min(merged.start, ts), max(merged.end, ts)
        merged.events += 1
        merged.partition, merged.offset = r["partition"], max(merged.offset, r["offset"])
        merged.event_ms = max(merged.event_ms, ts)
        fold_event(merged, r)
    sessions += retired
    final = {(s.start, s.end) for s in sessions}
    result.puts = [s for s in sessions if s.dirty]
    last_record = records[-1] if records else None
    for s in state:
        if (s.start, s.end) not in final:
            where = (last_record["partition"], last_record["offset"]) if last_record else (s.partition, s.offset)
            result.deleted.append((s.start, s.end, *where))
    return result


def finish_values(aggs: tuple[Aggregation, ...], s: Session) -> dict[str, Any]:
    values = dict(s.values)
    for a in aggs:
        if a.op == "avg":
            values[a.target] = s.sums.get(a.target, 0.0) / s.events if s.events else None
    return values


def session_from_state(aggs: tuple[Aggregation, ...], row: dict[str, Any]) -> Session:
    values = {a.target: row[a.target] for a in aggs}
    sums = {a.target: (row[a.target] or 0.0) * row["events"] for a in aggs if a.op == "avg"}
    return Session(row["window_start"], row["window_end"], row["events"], values, sums,
                   row[SOURCE_PARTITION], row[SOURCE_OFFSET], row["window_end"])


def output_schema(store: StoreDefinition) -> pa.Schema:
    arrow = {"long": pa.int64(), "double": pa.float64(), "string": pa.string()}
    return pa.schema([("kind", pa.string()), ("key", pa.string()), ("window_start", pa.int64()),
                      ("window_end", pa.int64()),
                      # Aggregated fields only: derived ones are computed from these as the changelog is written.
                      *[(a.target, arrow[store.value_field(a.target).type]) for a in store.aggregations],
                      ("events", pa.int64()), (SOURCE_PARTITION, pa.int32()), (SOURCE_OFFSET, pa.int64()),
                      ("event_ms", pa.int64())])


def output_ddl(store: StoreDefinition) -> str:
    """The same schema as output_schema, as the Spark DDL mapInArrow declares."""
    spark = {pa.string(): "string", pa.int64(): "bigint", pa.int32(): "int", pa.float64(): "double"}
    return ", ".join(f"`{f.name}` {spark[f.type]}" for f in output_schema(store))


def merge_partition(store: StoreDefinition, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow body: rows sorted by (key, kind, offset) -> kind put|delete|late rows."""
    assert store.session is not None
    aggs, spec = store.aggregations, store.session
    schema = output_schema(store)
    names = [a.target for a in store.aggregations]
    out: dict[str, list] = {n: [] for n in schema.names}

    def emit(kind: str, key: str, start: int, end: int, values: dict[str, Any] | None, events: int | None,
             partition: int, offset: int, event_ms: int | None) -> None:
        for n, v in (("kind", kind), ("key", key), ("window_start", start), ("window_end", end),
                     ("events", events), (SOURCE_PARTITION, partition), (SOURCE_OFFSET, offset),
                     ("event_ms", event_ms)):
            out[n].append(v)
        for n in names:
            out[n].append(None if values is None else values.get(n))

    def flush_key(key: str, state: list[Session], records: list[dict[str, Any]]) -> None:
        res = process_key(aggs, spec, state, records)
        for s in res.puts:
            emit("put", key, s.start, s.end, finish_values(aggs, s), s.events, s.partition, s.offset, s.event_ms)
        for start, end, partition, offset in res.deleted:
            emit("delete", key, start, end, None, None, partition, offset, None)
        by_offset = {r["offset"]: r for r in records}
        for off in res.late_offsets:
            emit(LATE, key, None, None, None, None, by_offset[off]["partition"], off, None)

    # Each row as a dict of only the fields its kind uses (a record's, or a state entry's).
    record_fields = ["partition", "offset", "ts", "stream_time", "store_time", "is_delete",
                     *sorted({a.source_field for a in aggs if a.source_field} - {"ts"})]
    state_fields = ["window_start", "window_end", *[a.target for a in aggs], "events",
                    SOURCE_PARTITION, SOURCE_OFFSET]
    current: str | None = None
    state: list[Session] = []
    records: list[dict[str, Any]] = []
    for batch in batches:
        cols = batch.to_pydict()
        rows = zip(cols["key"], cols["kind"], zip(*[cols[f] for f in record_fields]),
                   zip(*[cols[f] for f in state_fields]))
        for key, kind, record, entry in rows:
            if key != current:
                if current is not None:
                    flush_key(current, state, records)
                current, state, records = key, [], []
            if kind == STATE:
                state.append(session_from_state(aggs, dict(zip(state_fields, entry))))
            else:
                records.append(dict(zip(record_fields, record)))
        if len(out["kind"]) >= 50_000:
            yield pa.RecordBatch.from_pydict(out, schema=schema)
            out = {n: [] for n in schema.names}
    if current is not None:
        flush_key(current, state, records)
    if out["kind"]:
        yield pa.RecordBatch.from_pydict(out, schema=schema)
