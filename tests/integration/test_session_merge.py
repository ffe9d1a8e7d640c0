"""The session merge (io.deltastate.SessionMerge, called on rows through tests/support/session_merge.py)
against Kafka Streams' rules: worked examples at the rules' boundaries, and the independent reference
on many random single-partition streams: out of order, late, bridging events, deletes; with a long
retention, and with the shortest ones Kafka Streams allows (gap + grace, and gap alone with no
grace), where retention decides which sessions an event reaches.

The worked examples (KStreamSessionWindowAggregate, Kafka Streams 4.x): windowCloseTime =
observedStreamTime - grace - inactivityGap, the record dropped when the merged session's end <
windowCloseTime; findSessions(ts - gap, ts + gap) picks the sessions to merge; the session store
returns sessions ending after its observed time - retention."""

from __future__ import annotations

import json
import random

import pytest
from support.reference import Record
from support.reference_windowed import Spec, run
from support.session_merge import Merge, Put, state_row

from deltastate.changelog.rules import is_retained
from deltastate.stores.definition import Aggregation, SessionSpec
from deltastate.stores.ops import MEAN, combine, contribution, op

AGGS = (Aggregation("session_start", "min", "ts"), Aggregation("session_end", "max", "ts"),
        Aggregation("event_count", "count", None), Aggregation("last_page", "last", "page"),
        Aggregation("avg_ts", "avg", "ts"))
VALUES = {"session_start": ("min", "ts"), "session_end": ("max", "ts"), "event_count": ("count", None),
          "last_page": ("last", "page"), "avg_ts": ("avg", "ts")}
TYPES = {"session_start": "long", "session_end": "long", "event_count": "long", "last_page": "string",
         "avg_ts": "double"}
SESSIONS = SessionSpec(gap_ms=100, grace_ms=30, retention_ms=2_000)
COUNT = (Aggregation("event_count", "count", None),)
_merges: dict = {}


def _merge(spark, spec: SessionSpec) -> Merge:
    if (spec, "all") not in _merges:
        _merges[(spec, "all")] = Merge(spark, AGGS, spec, TYPES)
    return _merges[(spec, "all")]


def _count_merge(spark, spec: SessionSpec) -> Merge:
    if (spec, "count") not in _merges:
        _merges[(spec, "count")] = Merge(spark, COUNT, spec, {"event_count": "long"})
    return _merges[(spec, "count")]


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


def engine(merge: Merge, records: list[Record], batch_sizes: random.Random | None = None,
           max_batch: int = 40, expired: bool = False) -> dict[tuple[str, int, int], dict]:
    """Applies records in micro-batches (one record each, or 1..max_batch drawn from batch_sizes), each
    batch's keys in one merge call, carrying the keys' sessions between batches. The entries past
    retention are left out unless `expired`."""
    spec = merge.spec
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
        asked = {key: ([{**row, "window_start": s, "window_end": e} for (s, e), row in store.get(key, {}).items()],
                       mine) for key, mine in by_key.items()}
        for key, result in merge.batch(asked).items():
            entries = store.setdefault(key, {})
            for start, end, _, _ in result.deleted:
                del entries[(start, end)]
            for put in result.puts:
                entries[(put.start, put.end)] = {**put.values, "events": put.events,
                                                 "source_partition": put.partition, "source_offset": put.offset}
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
def test_session_merge_equals_reference(spark, seed, batching, spec_name):
    """Long batches with few deletes give a key more sessions in one call than the merge keeps live
    (some retire)."""
    spec = SPECS[spec_name]
    records = stream(seed) if batching != 5_000 else stream(seed, n=1_200, deletes=0.002)
    reference = run(reference_spec(spec), records)
    expected = reference.state
    merge = _merge(spark, spec)
    got = engine(merge, records, None if batching is None else random.Random(seed), max_batch=batching or 1)
    assert set(got) == set(expected)
    if batching:
        # The changelog too, sessions past retention included: what batches emit is what records do.
        batched = engine(merge, records, random.Random(seed), max_batch=batching, expired=True)
        one_by_one = engine(merge, records, expired=True)
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


def _session(start: int, end: int, events: int = 1, offset: int = 0) -> dict:
    return state_row(start, end, {"event_count": events}, events, 0, offset)


def _event(offset: int, ts: int, stream_time: int, before: int | None = None) -> dict:
    return {"offset": offset, "partition": 0, "ts": ts, "stream_time": stream_time,
            "store_time": stream_time if before is None else before, "is_delete": False}


def _bounds(sessions: list[Put]) -> set[tuple[int, int, int]]:
    return {(s.start, s.end, s.events) for s in sessions}


@pytest.mark.parametrize(("ts", "late"), [(869, True), (870, False), (871, False)])
def test_lone_event_at_the_close_time(spark, ts: int, late: bool) -> None:
    """No session within the gap: the merged session is the event alone, [ts, ts]."""
    result = _count_merge(spark, SESSIONS).key([_session(1_000, 1_000, offset=1)], [_event(2, ts, 1_000)])
    assert result.late_offsets == ([2] if late else [])
    assert _bounds(result.puts) == (set() if late else {(ts, ts, 1)})


def test_late_alone_but_merged_into_a_later_session(spark) -> None:
    """ts 800 < close time 870, but findSessions(700, 900) reaches [880, 1_000]: the merged end 1_000
    is not late, so the event extends the session backwards."""
    result = _count_merge(spark, SESSIONS).key([_session(880, 1_000, 3)], [_event(5, 800, 1_000)])
    assert result.late_offsets == []
    assert _bounds(result.puts) == {(800, 1_000, 4)}
    assert [(s, e) for s, e, _, _ in result.deleted] == [(880, 1_000)]


@pytest.mark.parametrize(("second_start", "bridged"), [(980, True), (981, False)])
def test_event_bridging_two_sessions(spark, second_start: int, bridged: bool) -> None:
    """[700, 780] and [second_start, 1_000], event at 880 (close time 870): findSessions(780, 980)
    reaches [700, 780] (end 780 >= 780: the gap is inclusive) and the second session only when it
    starts at or before 980. Bridged: one session [700, 1_000] and tombstones for both."""
    state = [_session(700, 780, 2), _session(second_start, 1_000, 3)]
    result = _count_merge(spark, SESSIONS).key(state, [_event(9, 880, 1_000)])
    if bridged:
        assert _bounds(result.puts) == {(700, 1_000, 6)}
        assert sorted((s, e) for s, e, _, _ in result.deleted) == [(700, 780), (980, 1_000)]
    else:
        assert _bounds(result.puts) == {(700, 880, 3)}
        assert [(s, e) for s, e, _, _ in result.deleted] == [(700, 780)]




def test_merge_reaches_only_retained_sessions(spark) -> None:
    """Retention gap + grace = 130 at store time 1_000: reads start at 871. An event at 880 is
    within the gap of [770, 870] but the store no longer returns it: a new session [880, 880]."""
    spec = SessionSpec(gap_ms=100, grace_ms=30, retention_ms=130)
    result = _count_merge(spark, spec).key([_session(770, 870, 2)], [_event(4, 880, 1_000)])
    assert _bounds(result.puts) == {(880, 880, 1)} and result.deleted == []
    result = _count_merge(spark, spec).key([_session(771, 871, 2)], [_event(4, 880, 1_000)])
    assert _bounds(result.puts) == {(771, 880, 3)}


@pytest.mark.parametrize(("before", "merged"), [(1_000, False), (999, True)])
def test_merge_judges_retention_at_the_stream_time_before_the_event(spark, before: int, merged: bool) -> None:
    """No grace, retention = gap = 100, event at 1_000 (stream time 1_000), session [850, 900]:
    findSessions(900, 1_100) runs before the event's session is stored. If the store had already
    seen 1_000, reads start at 901 and miss it; if it had seen 999, they start at 900 and merge."""
    spec = SessionSpec(gap_ms=100, grace_ms=0, retention_ms=100)
    result = _count_merge(spark, spec).key([_session(850, 900, 2)], [_event(3, 1_000, 1_000, before=before)])
    assert _bounds(result.puts) == ({(850, 1_000, 3)} if merged else {(1_000, 1_000, 1)})


def test_each_combine_folds_as_the_op_table_says(spark) -> None:
    """Every op over long, double and string fields, nulls among them, through the JVM merge: two
    live sessions bridged by an event, two more events joining the merged session, the values
    equal to folding the same inputs with stores/ops.py's combine in offset order."""
    aggs = (Aggregation("n", "count", None), Aggregation("total", "sum", "amount"),
            Aggregation("units", "sum", "qty"), Aggregation("first_page", "min", "page"),
            Aggregation("last_page_max", "max", "page"), Aggregation("latest_page", "last", "page"),
            Aggregation("smallest", "min", "amount"), Aggregation("mean", "avg", "amount"))
    types = {"n": "long", "total": "double", "units": "long", "first_page": "string", "last_page_max": "string",
             "latest_page": "string", "smallest": "double", "mean": "double"}
    merge = Merge(spark, aggs, SESSIONS, types, {"amount": "double", "qty": "bigint", "page": "string"})
    older = {"n": 2, "total": 5.5, "units": 3, "first_page": "/b", "last_page_max": "/m", "latest_page": "/m",
             "smallest": 1.5, "mean": 2.75}
    newer = {"n": 1, "total": None, "units": 7, "first_page": "/z", "last_page_max": "/z", "latest_page": "/z",
             "smallest": None, "mean": None}
    state = [state_row(700, 780, older, 2, 0, 4), state_row(900, 950, newer, 1, 0, 8)]
    # The first event bridges [700, 780] and [900, 950]; none carries a page, so `last` keeps the
    # page of the session with the higher offset, whichever the merge meets first.
    events = [{"ts": 850, "amount": None, "qty": 4, "page": None},
              {"ts": 860, "amount": 2.0, "qty": None, "page": None},
              {"ts": 870, "amount": -1.0, "qty": 1, "page": None}]
    records = [{**e, "offset": 10 + i, "partition": 0, "stream_time": 1_000, "store_time": 1_000, "is_delete": False}
               for i, e in enumerate(events)]
    result = merge.key(state, records)
    assert [(p.start, p.end, p.events) for p in result.puts] == [(700, 950, 6)]
    assert sorted((s, e) for s, e, _, _ in result.deleted) == [(700, 780), (900, 950)]

    # The reference: the two sessions in offset order, then each event, by the op table.
    expected = {}
    for a in aggs:
        kind = op(a.op).combine
        if kind == MEAN:
            sums = [older["mean"] * 2, 0.0, *[e["amount"] for e in events]]
            expected[a.target] = sum(x for x in sums if x is not None) / 6
            continue
        held = combine(kind, older[a.target], newer[a.target])
        for e in events:
            held = combine(kind, held, contribution(a.op, None if a.source_field is None else e[a.source_field]))
        expected[a.target] = held
    assert result.puts[0].values == pytest.approx(expected)
