"""Window fetch and findSessions from REAL runs: trades and clicks produced to the session broker,
run by the window/session engine into their Delta changelogs, published, then read through the REST
service (and the CLI), compared with tests/reference_windowed.py computed from the same records.
A second run that is not published must show up with fresh=true, including the tombstones the
engine writes when sessions merge (the latest-per-key view never holds superseded sessions)."""

from __future__ import annotations

import json
import math
import random
from typing import Any

import click
import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient
from reference import ReferenceTopic
from reference_windowed import Spec, run

from deltastate.cli.query_cmd import register
from deltastate.engine.runner import run_store
from deltastate.ingest.partitioner import partition_for
from deltastate.ingest.producer import ensure_topic, produce_records
from deltastate.ingest.timed_workloads import TimeShape, click_records, trade_records
from deltastate.service import create_app
from deltastate.snapshot import publish_snapshot
from deltastate.stores import load_store
from deltastate.stores.definition import StoreDefinition

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1800)]
PARTITIONS = 4
T0 = 1_700_000_000_000


def spec_of(d: StoreDefinition) -> Spec:
    """The reference's parameters, read from the store's declaration (the specification)."""
    aggs = {a.target: (a.op, a.source_field) for a in d.aggregations}
    rule = d.tombstone_rule
    delete = (rule.field, rule.equals) if rule.field else None
    if d.type == "window":
        w = d.window
        return Spec("window", aggs, size=w.size_ms, advance=w.advance_ms, grace=w.grace_ms, retention=w.retention_ms,
                    ts_field=d.event_time_field, delete_field=delete)
    s = d.session
    return Spec("session", aggs, gap=s.gap_ms, grace=s.grace_ms, retention=s.retention_ms, ts_field=d.event_time_field,
                delete_field=delete)


def workload(store: str, n: int, seed: int, start: int) -> list[tuple[bytes, bytes | None]]:
    if store == "trade_stats":
        return list(trade_records(n, 8, seed, TimeShape(start_ts=start, step_ms=15, disorder=0.2, disorder_ms=1_500,
                                                        late=0.02, late_ms=8_000)))
    return list(click_records(n, 12, seed, TimeShape(start_ts=start, step_ms=60_000, disorder=0.3, disorder_ms=250_000,
                                                     late=0.02, late_ms=2_400_000)))


def same(rows: list[dict[str, Any]], expected: list[tuple[tuple[str, int, int], dict[str, Any]]]) -> bool:
    """Rows equal the expected entries, in order (floats within 1e-9 relative)."""
    if [(r["key"], r["window_start"], r["window_end"]) for r in rows] != [e for e, _ in expected]:
        return False
    for row, (_, values) in zip(rows, expected):
        for name, want in values.items():
            got = row[name]
            if not (math.isclose(got, want, rel_tol=1e-9) if isinstance(want, float) else got == want):
                return False
    return True


def fetch(state: dict, key: str | None, lo: int, hi: int) -> list:
    hits = [(e, v) for e, v in state.items() if (key is None or e[0] == key) and lo <= e[1] <= hi]
    return sorted(hits, key=lambda x: (x[0][1], x[0][0], x[0][2]))


def find_sessions(state: dict, key: str, earliest_end: int, latest_start: int) -> list:
    hits = [(e, v) for e, v in state.items() if e[0] == key and e[2] >= earliest_end and e[1] <= latest_start]
    return sorted(hits, key=lambda x: (x[0][1], x[0][2]))


@pytest.mark.parametrize(("store", "seed"), [("trade_stats", 31), ("user_sessions", 32)])
def test_window_and_session_reads_from_real_runs(store: str, seed: int, broker, spark, make_settings, topic) -> None:
    settings = make_settings()
    definition = load_store(settings, store)
    assert ensure_topic(broker, topic, PARTITIONS)
    ref = ReferenceTopic(PARTITIONS, partition_for)
    first = workload(store, 900, seed, T0)
    assert produce_records(broker, topic, first).delivered == len(first)
    ref.append(first)
    run_store(settings, store, once=True, topic=topic)
    publish_snapshot(spark, settings, [definition])
    exp1 = run(spec_of(definition), ref.records).state
    assert len(exp1) > 20
    keys = sorted({e[0] for e in exp1})
    starts = sorted(e[1] for e in exp1)
    rng = random.Random(seed)
    with TestClient(create_app(settings)) as client:
        for _ in range(12):
            key = rng.choice(keys)
            lo = rng.choice(starts) - rng.randint(0, 5_000)
            hi = lo + rng.randint(0, (starts[-1] - starts[0]) // 3)
            if store == "trade_stats":
                got = client.get(f"/stores/{store}/keys/{key}/windows", params={"from": lo, "to": hi}).json()["rows"]
                assert same(got, fetch(exp1, key, lo, hi)), (key, lo, hi)
                body = client.get(f"/stores/{store}/windows", params={"from": lo, "to": hi, "limit": 10_000}).json()
                assert same(body["rows"], fetch(exp1, None, lo, hi)) and not body["truncated"]
            else:
                got = client.get(f"/stores/{store}/keys/{key}/sessions",
                                 params={"earliest_end": lo, "latest_start": hi}).json()["rows"]
                assert same(got, find_sessions(exp1, key, lo, hi)), (key, lo, hi)
                everything = client.get(f"/stores/{store}/keys/{key}/sessions").json()["rows"]
                assert same(everything, find_sessions(exp1, key, -1, 2**62))

        # The CLI answers from the same functions.
        group = click.Group("main")
        register(group)
        key = keys[0]
        args = (["windows", store, key, "--from", str(starts[0]), "--to", str(starts[-1])] if store == "trade_stats"
                else ["sessions", store, key])
        out = CliRunner().invoke(group, [*args, "--json"], obj=settings)
        assert out.exit_code == 0, out.output + out.stderr
        want = fetch(exp1, key, starts[0], starts[-1]) if store == "trade_stats" else find_sessions(exp1, key, -1, 2**62)
        assert same([json.loads(line) for line in out.output.splitlines()], want)

        # A second run, committed but not published: fresh=true sees it, the plain read does not.
        later = max(e[2] for e in exp1) + 1
        second = workload(store, 300, seed + 100, later - (3_000 if store == "trade_stats" else 1_200_000))
        assert produce_records(broker, topic, second).delivered == len(second)
        ref.append(second)
        run_store(settings, store, once=True, topic=topic)
        exp2 = run(spec_of(definition), ref.records).state
        assert exp2 != exp1
        changed = sorted({e[0] for e in set(exp1) ^ set(exp2)} | {e[0] for e in exp1.keys() & exp2.keys() if exp1[e] != exp2[e]})
        assert changed
        for key in changed[:6]:
            if store == "trade_stats":
                path, params = f"/stores/{store}/keys/{key}/windows", {}
                plain, fresh = fetch(exp1, key, -1, 2**62), fetch(exp2, key, -1, 2**62)
            else:
                path, params = f"/stores/{store}/keys/{key}/sessions", {}
                plain, fresh = find_sessions(exp1, key, -1, 2**62), find_sessions(exp2, key, -1, 2**62)
            assert same(client.get(path, params=params).json()["rows"], plain), key
            r = client.get(path, params={**params, "fresh": "true"})
            assert r.status_code == 200 and same(r.json()["rows"], fresh), key
            assert r.json()["meta"]["staleness_seconds"] == 0.0
