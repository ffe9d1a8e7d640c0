"""The session merge (deltastate.engine.sessions.process_key) against the independent reference,
on many random single-partition streams: out of order, late, bridging events, deletes."""

from __future__ import annotations

import json
import random

import pytest
from reference import Record
from reference_windowed import Spec, run

from deltastate.engine.sessions import finish_values, process_key
from deltastate.stores.definition import Aggregation

AGGS = (Aggregation("session_start", "min", "ts"), Aggregation("session_end", "max", "ts"),
        Aggregation("event_count", "count", None), Aggregation("last_page", "last", "page"),
        Aggregation("avg_ts", "avg", "ts"))
SPEC = Spec("session", {"session_start": ("min", "ts"), "session_end": ("max", "ts"), "event_count": ("count", None),
                        "last_page": ("last", "page"), "avg_ts": ("avg", "ts")},
            gap=100, grace=30, retention=2_000)


def stream(seed: int, n: int = 300) -> list[Record]:
    rng = random.Random(seed)
    clock, out = 0, []
    for offset in range(n):
        clock += rng.choice((0, 5, 20, 60, 150))
        key = rng.choice("abcd").encode()
        if rng.random() < 0.03:
            out.append(Record(0, offset, key, None))
            continue
        ts = max(0, clock - rng.choice((0, 0, 0, 10, 40, 90, 400)))
        out.append(Record(0, offset, key, json.dumps({"user_id": key.decode(), "page": f"/p{offset}", "ts": ts}).encode()))
    return out


def engine(records: list[Record]) -> dict[tuple[str, int, int], dict]:
    """Applies records one at a time (each as its own micro-batch), carrying the key's sessions."""
    st = None
    sessions: dict[str, list] = {}
    for r in records:
        key = r.key.decode()
        doc = None if r.value is None else json.loads(r.value)
        if doc is not None:
            st = doc["ts"] if st is None else max(st, doc["ts"])
        row = {"offset": r.offset, "partition": 0, "is_delete": doc is None, "ts": None if doc is None else doc["ts"],
               "stream_time": st, **({} if doc is None else {"page": doc["page"]})}
        result = process_key(AGGS, SPEC.gap, SPEC.grace, SPEC.retention, sessions.get(key, []), [row])
        gone = {(s, e) for s, e, _, _ in result.deleted}
        kept = [s for s in sessions.get(key, []) if (s.start, s.end) not in gone and not (row["is_delete"])]
        for s in result.puts:
            s.dirty = False
        sessions[key] = [s for s in kept if all((s.start, s.end) != (p.start, p.end) for p in result.puts)] + result.puts
    out = {}
    for key, mine in sessions.items():
        for s in mine:
            if st is not None and s.end <= st - SPEC.retention:
                continue
            out[(key, s.start, s.end)] = finish_values(AGGS, s)
    return out


@pytest.mark.parametrize("seed", range(25))
def test_session_merge_equals_reference(seed):
    records = stream(seed)
    expected = run(SPEC, records).state
    got = engine(records)
    assert set(got) == set(expected)
    for entry, values in expected.items():
        for name, want in values.items():
            assert got[entry][name] == pytest.approx(want), (entry, name)
