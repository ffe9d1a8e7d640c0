"""A pure-Python reference of window and session stores, written from the specification (README,
"Window and session stores") and importing nothing from deltastate.

It keeps, per window or session, the raw events that belong to it and computes the values only at
the end, so it shares no incremental arithmetic with the engine. Rules it implements:
  * keys are partition-local; each partition's records are processed in offset order;
  * stream time per partition = the largest event time of the events seen so far in it, the
    current one included (deletes do not move it);
  * windows: epoch-aligned [start, start + size), starts every `advance`; an event goes to each of
    its windows with stream time < end + grace; with none open it is late;
  * sessions: an event merges every session of its key with end >= ts - gap, start <= ts + gap and
    end > stream time - retention; it is late when the merged end < stream time - grace;
  * a delete (null value, or the store's tombstone field value) removes every window/session of
    the key; later events start afresh;
  * the queryable state excludes entries whose end <= the partition's stream time - retention;
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


def run(spec: Spec, records: list[Record]) -> Outcome:
    """The store after applying every record (all valid), grouped per partition in offset order."""
    out = Outcome()
    # key -> {(start, end): [(offset, doc)]}
    entries: dict[str, dict[tuple[int, int], list[tuple[int, dict]]]] = defaultdict(dict)
    key_partition: dict[str, int] = {}
    for p in sorted({r.partition for r in records}):
        st: int | None = None
        for r in sorted((r for r in records if r.partition == p), key=lambda r: r.offset):
            key = r.key.decode()
            key_partition[key] = p
            doc = None if r.value is None else json.loads(r.value)
            if _is_delete(spec, doc):
                entries[key] = {}
                out.deletes += 1
                out.applied += 1
                continue
            ts = doc[spec.ts_field]
            st = ts if st is None else max(st, ts)
            if spec.kind == "window":
                first = max(0, (ts - spec.size) // spec.advance * spec.advance)
                starts = [s for s in range(first, ts + 1, spec.advance) if s <= ts < s + spec.size]
                open_ = [s for s in starts if st < s + spec.size + spec.grace]
                if not open_:
                    out.late.append(r)
                    continue
                for s in open_:
                    entries[key].setdefault((s, s + spec.size), []).append((r.offset, doc))
            else:
                mine = entries[key]
                hits = [b for b in mine if b[1] >= ts - spec.gap and b[0] <= ts + spec.gap and b[1] > st - spec.retention]
                merged_end = max([ts] + [b[1] for b in hits])
                if merged_end < st - spec.grace:
                    out.late.append(r)
                    continue
                events = [(r.offset, doc)] + [e for b in hits for e in mine.pop(b)]
                times = [d[spec.ts_field] for _, d in events]
                mine[(min(times), max(times))] = events
            out.applied += 1
        if st is not None:
            out.stream_time[p] = st
    for key, mine in entries.items():
        st = out.stream_time.get(key_partition[key])
        for (start, end), events in mine.items():
            if st is not None and end <= st - spec.retention:
                continue
            out.state[(key, start, end)] = _values(spec, events)
    return out
