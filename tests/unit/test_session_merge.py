"""The session merge (deltastate.engine.windowed.sessions.process_key) against the independent reference
of Kafka Streams' rules, on many random single-partition streams: out of order, late, bridging
events, deletes; with a long retention, and with the shortest ones Kafka Streams allows (gap +
grace, and gap alone with no grace), where retention decides which sessions an event reaches."""

from __future__ import annotations

import json
import random

import pytest
from support.reference import Record
from support.reference_windowed import Spec, run

from deltastate.changelog.rules import is_retained
from deltastate.engine.windowed.sessions import finish_values, process_key, session_from_state
from deltastate.stores.definition import Aggregation, SessionSpec

AGGS = (Aggregation("session_start", "min", "ts"), Aggregation("session_end", "max", "ts"),
        Aggregation("event_count", "count", None), Aggregation("last_page", "last", "page"),
        Aggregation("avg_ts", "avg", "ts"))
VALUES = {"session_start": ("min", "ts"), "session_end": ("max", "ts"), "event_count": ("count", None),
          "last_page": ("last", "page"), "avg_ts": ("avg", "ts")}
# (gap, grace, retention): a long retention; retention = gap + grace (Kafka Streams' default); no grace
# and retention = gap (the least SessionStoreMaterializer accepts).
SPECS = {"long": SessionSpec(100, 30, 2_000), "gap_plus_grace": SessionSpec(100, 30, 130),
         "no_grace": SessionSpec(100, 0, 100)}


def reference_spec(spec: SessionSpec) -> Spec:
    return Spec("session", VALUES, gap=spec.gap_ms, grace=spec.grace_ms, retention=spec.retention_ms)


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


def engine(spec: SessionSpec, records: list[Record], batch_sizes: random.Random | None = None,
           max_batch: int = 40, expired: bool = False) -> dict[tuple[str, int, int], dict]:
    """Applies records in micro-batches (one record each, or 1..max_batch drawn from batch_sizes), each key's
    records of a batch in one process_key call, carrying the key's sessions between batches. The
    entries past retention are left out unless `expired`."""
    st = None
    rows = []
    for r in records:
        doc = None if r.value is None else json.loads(r.value)
        before = st
        if doc is not None:
            st = doc["ts"] if st is None else max(st, doc["ts"])
        rows.append((r.key.decode(), {"offset": r.offset, "partition": 0, "is_delete": doc is None,
                                      "ts": None if doc is None else doc["ts"], "stream_time": st,
                                      "store_time": before,
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
            result = process_key(AGGS, spec, state, mine)
            for start, end, _, _ in result.deleted:
                del entries[(start, end)]
            for s in result.puts:
                entries[(s.start, s.end)] = {**finish_values(AGGS, s), "events": s.events,
                                             "source_partition": s.partition, "source_offset": s.offset}
    sessions = {key: [(s, e, row) for (s, e), row in entries.items()] for key, entries in store.items()}
    out = {}
    for key, mine in sessions.items():
        for start, end, row in mine:
            if not expired and not is_retained(spec, start, end, st):
                continue
            out[(key, start, end)] = {a.target: row[a.target] for a in AGGS}
    return out


@pytest.mark.parametrize("spec_name", sorted(SPECS))
@pytest.mark.parametrize("batching", [None, 40, 5_000], ids=["record_by_record", "micro_batches", "long_batches"])
@pytest.mark.parametrize("seed", range(12))
def test_session_merge_equals_reference(seed, batching, spec_name):
    """Long batches with few deletes give a key more sessions in one call than the merge keeps live
    (some retire)."""
    spec = SPECS[spec_name]
    records = stream(seed) if batching != 5_000 else stream(seed, n=1_200, deletes=0.002)
    reference = run(reference_spec(spec), records)
    expected = reference.state
    got = engine(spec, records, None if batching is None else random.Random(seed), max_batch=batching or 1)
    assert set(got) == set(expected)
    if batching:
        # The changelog too, sessions past retention included: what batches emit is what records do.
        batched = engine(spec, records, random.Random(seed), max_batch=batching, expired=True)
        one_by_one = engine(spec, records, expired=True)
        assert set(batched) == set(one_by_one)
        for entry, values in one_by_one.items():  # avg sums may differ in the last bit by merge order
            assert batched[entry] == pytest.approx(values), entry
    for entry, values in expected.items():
        for name, want in values.items():
            assert got[entry][name] == pytest.approx(want), (entry, name)


def test_streams_exercise_the_boundaries():
    """The random streams reach the cases the rules separate: late events, and (short retention)
    events whose gap reaches a session the store no longer returns."""
    late = sum(len(run(reference_spec(SPECS["long"]), stream(seed)).late) for seed in range(12))
    assert late > 25
    spec = reference_spec(SPECS["gap_plus_grace"])
    by_retention = [run(spec, stream(seed)).state != run(Spec("session", VALUES, gap=100, grace=30, retention=10**9),
                                                          stream(seed)).state for seed in range(25)]
    assert any(by_retention)
