"""The session merge (deltastate.engine.windowed.sessions.process_key) against the independent reference,
on many random single-partition streams: out of order, late, bridging events, deletes."""

from __future__ import annotations

import json
import random

import pytest
from support.reference import Record
from support.reference_windowed import Spec, run

from deltastate.engine.windowed.sessions import finish_values, process_key, session_from_state
from deltastate.stores.definition import Aggregation

AGGS = (Aggregation("session_start", "min", "ts"), Aggregation("session_end", "max", "ts"),
        Aggregation("event_count", "count", None), Aggregation("last_page", "last", "page"),
        Aggregation("avg_ts", "avg", "ts"))
SPEC = Spec("session", {"session_start": ("min", "ts"), "session_end": ("max", "ts"), "event_count": ("count", None),
                        "last_page": ("last", "page"), "avg_ts": ("avg", "ts")},
            gap=100, grace=30, retention=2_000)


def stream(seed: int, n: int = 300, deletes: float = 0.03) -> list[Record]:
    rng = random.Random(seed)
    clock, out = 0, []
    for offset in range(n):
        clock += rng.choice((0, 5, 20, 60, 150))
        key = rng.choice("abcd").encode()
        if rng.random() < deletes:
            out.append(Record(0, offset, key, None))
            continue
        ts = max(0, clock - rng.choice((0, 0, 0, 10, 40, 90, 400)))
        out.append(Record(0, offset, key, json.dumps({"user_id": key.decode(), "page": f"/p{offset}", "ts": ts}).encode()))
    return out


def engine(records: list[Record], batch_sizes: random.Random | None = None,
           max_batch: int = 40, expired: bool = False) -> dict[tuple[str, int, int], dict]:
    """Applies records in micro-batches (one record each, or 1..max_batch drawn from batch_sizes), each key's
    records of a batch in one process_key call, carrying the key's sessions between batches. The
    entries past retention are left out unless `expired`."""
    st = None
    rows = []
    for r in records:
        doc = None if r.value is None else json.loads(r.value)
        if doc is not None:
            st = doc["ts"] if st is None else max(st, doc["ts"])
        rows.append((r.key.decode(), {"offset": r.offset, "partition": 0, "is_delete": doc is None,
                                      "ts": None if doc is None else doc["ts"], "stream_time": st,
                                      **({} if doc is None else {"page": doc["page"]})}))
    # The store as the changelog holds it: each key's sessions as their emitted records, turned back
    # into state for the next batch, as the engine reads them.
    store: dict[str, dict[tuple[int, int], dict]] = {}
    i = 0
    while i < len(rows):
        n = 1 if batch_sizes is None else batch_sizes.randint(1, max_batch)
        by_key: dict[str, list[dict]] = {}
        for key, row in rows[i:i + n]:
            by_key.setdefault(key, []).append(row)
        i += n
        for key, mine in by_key.items():
            entries = store.setdefault(key, {})
            state = [session_from_state(AGGS, {**row, "window_start": s, "window_end": e})
                     for (s, e), row in entries.items()]
            result = process_key(AGGS, SPEC.gap, SPEC.grace, SPEC.retention, state, mine)
            for start, end, _, _ in result.deleted:
                del entries[(start, end)]
            for s in result.puts:
                entries[(s.start, s.end)] = {**finish_values(AGGS, s), "events": s.events,
                                             "source_partition": s.partition, "source_offset": s.offset}
    sessions = {key: [(s, e, row) for (s, e), row in entries.items()] for key, entries in store.items()}
    out = {}
    for key, mine in sessions.items():
        for start, end, row in mine:
            if not expired and st is not None and end <= st - SPEC.retention:
                continue
            out[(key, start, end)] = {a.target: row[a.target] for a in AGGS}
    return out


@pytest.mark.parametrize("batching", [None, 40, 5_000], ids=["record_by_record", "micro_batches", "long_batches"])
@pytest.mark.parametrize("seed", range(25))
def test_session_merge_equals_reference(seed, batching):
    """Long batches with few deletes give a key more sessions in one call than the merge keeps live
    (some retire)."""
    records = stream(seed) if batching != 5_000 else stream(seed, n=1_200, deletes=0.002)
    expected = run(SPEC, records).state
    got = engine(records, None if batching is None else random.Random(seed), max_batch=batching or 1)
    assert set(got) == set(expected)
    if batching:
        # The changelog too, sessions past retention included: what batches emit is what records do.
        assert engine(records, random.Random(seed), max_batch=batching, expired=True) == engine(records, expired=True)
    for entry, values in expected.items():
        for name, want in values.items():
            assert got[entry][name] == pytest.approx(want), (entry, name)
