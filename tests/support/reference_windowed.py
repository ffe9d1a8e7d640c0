"""A pure-Python reference of window and session stores, written from Kafka Streams' (4.x) source
and importing nothing from deltastate.

It models the Kafka Streams parts literally, per source partition (a task): the aggregate
processor's stream time, and the RocksDB store's own observed time (the largest segment timestamp
it has stored), instead of deriving one from the other as the engine does. It keeps, per window or
session, the raw events that belong to it and computes the values only at the end, so it shares no
incremental arithmetic with the engine. The rules, with the Kafka Streams class each comes from:
  * keys are partition-local; each partition's records are processed in offset order;
  * stream time per partition = the largest event time of the events seen so far in it, the
    current one included (deletes do not move it); KStreamWindowAggregate and
    KStreamSessionWindowAggregate advance it before deciding;
  * windows (TimeWindows.windowsFor, KStreamWindowAggregate): the windows of ts start at every
    multiple of advance from max(0, ts - size + advance) up to ts; close time = stream time - grace;
    a window takes the event when its end > close time; with none taking it the event is late;
  * sessions (KStreamSessionWindowAggregate): findSessions(ts - gap, ts + gap) reaches the key's
    sessions with end >= ts - gap and start <= ts + gap that the store still returns; the merged
    session spans them and ts; close time = stream time - grace - gap; the event is late when the
    merged end < close time; otherwise the reached sessions are removed and the merged one stored;
  * store retention (AbstractRocksDBSegmentedBytesStore): every read starts at the store's observed
    time - retention + 1, compared with the segment timestamp: a window's start (WindowKeySchema),
    a session's end (SessionKeySchema); the observed time moves on each put and remove;
  * a delete (null value, or the store's tombstone field value) removes every window/session of
    the key; later events start afresh;
  * the queryable state = the entries the store still returns at the end;
  * values: count, sum, min, max, avg over an event field; last = the field of the event with the
    highest offset.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from support.reference import Record


@dataclass(frozen=True)
class Spec:
    kind: str  # "window" | "session"
    aggregations: dict[str, tuple[str, str | None]]  # target -> (op, field)
    size: int = 0
    advance: int = 0
    gap: int = 0
    grace: int = 0
    retention: int = 0
    ts_field: str = "ts"
    delete_field: tuple[str, str] | None = None


# The reference stores of schemas/stores/, as the issue specifies them (not read from the YAML).
SPECS = {
    "trade_stats": Spec("window", {"count": ("count", None), "sum_price": ("sum", "price"), "min_price": ("min", "price"),
                                   "max_price": ("max", "price"), "avg_price": ("avg", "price"), "volume": ("sum", "qty")},
                        size=5_000, advance=1_000, grace=2_000, retention=3_600_000),
    "pulse_counts": Spec("window", {"beats": ("count", None)}, size=60_000, advance=60_000, grace=5_000,
                         retention=21_600_000, delete_field=("event", "checkout")),
    "user_sessions": Spec("session", {"session_start": ("min", "ts"), "session_end": ("max", "ts"),
                                      "event_count": ("count", None), "last_page": ("last", "page")},
                          gap=1_800_000, grace=300_000, retention=86_400_000),
}


@dataclass
class Outcome:
    state: dict[tuple[str, int, int], dict[str, Any]] = field(default_factory=dict)
    late: list[Record] = field(default_factory=list)
    applied: int = 0
    deletes: int = 0
    stream_time: dict[int, int] = field(default_factory=dict)


def _values(spec: Spec, events: list[tuple[int, dict]]) -> dict[str, Any]:
    """events: (offset, doc) pairs."""
    out: dict[str, Any] = {}
    for target, (op, fld) in spec.aggregations.items():
        xs = [doc[fld] for _, doc in events] if fld else []
        if op == "count":
            out[target] = len(events)
        elif op == "sum":
            out[target] = sum(xs)
        elif op == "min":
            out[target] = min(xs)
        elif op == "max":
            out[target] = max(xs)
        elif op == "avg":
            out[target] = sum(xs) / len(xs)
        elif op == "last":
            out[target] = max(events, key=lambda e: e[0])[1][fld]
    return out


def _is_delete(spec: Spec, doc: dict | None) -> bool:
    if doc is None:
        return True
    return spec.delete_field is not None and doc.get(spec.delete_field[0]) == spec.delete_field[1]


def windows_for(spec: Spec, ts: int) -> list[int]:
    """TimeWindows.windowsFor: the starts of the windows containing ts."""
    start = max(0, ts - spec.size + spec.advance) // spec.advance * spec.advance
    out = []
    while start <= ts:
        out.append(start)
        start += spec.advance
    return out


class _Store:
    """One partition's segmented store: entries plus the observed time reads start from."""

    def __init__(self, spec: Spec) -> None:
        self.spec = spec
        self.observed: int | None = None
        # key -> {(start, end): [(offset, doc)]}
        self.entries: dict[str, dict[tuple[int, int], list[tuple[int, dict]]]] = defaultdict(dict)

    def _segment_time(self, bounds: tuple[int, int]) -> int:
        return bounds[0] if self.spec.kind == "window" else bounds[1]

    def _observe(self, bounds: tuple[int, int]) -> None:
        t = self._segment_time(bounds)
        self.observed = t if self.observed is None else max(self.observed, t)

    def live(self, bounds: tuple[int, int]) -> bool:
        return self.observed is None or self._segment_time(bounds) >= self.observed - self.spec.retention + 1

    def put(self, key: str, bounds: tuple[int, int], events: list[tuple[int, dict]]) -> None:
        self._observe(bounds)
        self.entries[key][bounds] = events

    def remove(self, key: str, bounds: tuple[int, int]) -> list[tuple[int, dict]]:
        self._observe(bounds)
        return self.entries[key].pop(bounds)


def run(spec: Spec, records: list[Record]) -> Outcome:
    """The store after applying every record (all valid), grouped per partition in offset order."""
    out = Outcome()
    for p in sorted({r.partition for r in records}):
        store = _Store(spec)
        st: int | None = None
        for r in sorted((r for r in records if r.partition == p), key=lambda r: r.offset):
            key = r.key.decode()
            doc = None if r.value is None else json.loads(r.value)
            if _is_delete(spec, doc):
                store.entries[key] = {}
                out.deletes += 1
                out.applied += 1
                continue
            ts = doc[spec.ts_field]
            st = ts if st is None else max(st, ts)
            mine = store.entries[key]
            if spec.kind == "window":
                close = st - spec.grace
                taking = [s for s in windows_for(spec, ts) if s + spec.size > close]
                if not taking:
                    out.late.append(r)
                    continue
                for s in taking:
                    bounds = (s, s + spec.size)
                    old = mine.get(bounds, []) if store.live(bounds) else []
                    store.put(key, bounds, old + [(r.offset, doc)])
            else:
                reached = [b for b in mine if b[1] >= ts - spec.gap and b[0] <= ts + spec.gap and store.live(b)]
                merged = (min([ts] + [b[0] for b in reached]), max([ts] + [b[1] for b in reached]))
                if merged[1] < st - spec.grace - spec.gap:
                    out.late.append(r)
                    continue
                events = [(r.offset, doc)] + [e for b in reached for e in store.remove(key, b)]
                store.put(key, merged, events)
            out.applied += 1
        if st is not None:
            out.stream_time[p] = st
        for key, mine in store.entries.items():
            for bounds, events in mine.items():
                if store.live(bounds):
                    out.state[(key, *bounds)] = _values(spec, events)
    return out
