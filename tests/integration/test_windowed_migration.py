"""Window and session store migrations through the real broker, Spark, Delta, DuckDB and the REST app.

trade_stats v1 -> v2 is rebuilt by replaying the topic (a rename, a dropped field, a derived field
and a new aggregation); user_sessions v1 -> v2 is seeded from the live state (a rename and a derived
field), with the live version's stream times carried so that a record late for v1 is late for v2.
Both keep v1 ingesting while v2 is built, cut over through the great-expectations checks, and are
compared with tests/support/reference_windowed.py run over the same records with v2's aggregations.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient
from support.migration import migration_settings
from support.reference import ReferenceTopic
from support.reference_windowed import SPECS, run
from support.windowed import assert_state_equal, snapshot_rows, workload

from deltastate.cli.main import cli
from deltastate.engine import run_store
from deltastate.ingest.partitioner import partition_for
from deltastate.ingest.producer import ensure_topic, produce_records
from deltastate.migration import steps
from deltastate.service import create_app
from deltastate.stores.current import read_record

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1800)]
PARTITIONS = 4
START = 1_700_000_000_000

# Version 2 of each store as the reference computes it: v1's aggregations renamed, dropped and added
# as schemas/stores/*.yaml declare, and the derived field computed here from the reference's values.
V2_SPECS = {
    "trade_stats": dataclasses.replace(SPECS["trade_stats"], aggregations={
        "trades": ("count", None), "min_price": ("min", "price"), "max_price": ("max", "price"),
        "avg_price": ("avg", "price"), "volume": ("sum", "qty"), "last_price": ("last", "price")}),
    "user_sessions": dataclasses.replace(SPECS["user_sessions"], aggregations={
        "session_start": ("min", "ts"), "session_end": ("max", "ts"), "clicks": ("count", None),
        "last_page": ("last", "page")}),
}
DERIVED = {"trade_stats": ("price_range", lambda v: v["max_price"] - v["min_price"]),
           "user_sessions": ("duration_ms", lambda v: v["session_end"] - v["session_start"])}


def expected_v2(store: str, records) -> dict:
    name, derive = DERIVED[store]
    return {entry: {**values, name: derive(values)} for entry, values in run(V2_SPECS[store], records).state.items()}


def after(records) -> int:
    return max(json.loads(v)["ts"] for _, v in records if v) + 1


def send(broker: str, topic: str, ref: ReferenceTopic, records) -> None:
    assert produce_records(broker, topic, records).delivered == len(records)
    ref.append(records)


def plan_json(settings, store: str) -> dict:
    result = CliRunner().invoke(cli, ["migrate", "plan", store, "--to", "2", "--json"], obj=settings)
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def audit_totals(spark, settings, storage: str) -> dict:
    return spark.read.format("delta").load(settings.table_path(storage, "intake")).selectExpr(
        "sum(records_in) AS records_in", "sum(late) AS late").first().asDict()


def test_window_store_migrates_by_replay(broker, spark, make_settings, tmp_path, topic):
    store = "trade_stats"
    settings = migration_settings(make_settings(), tmp_path / "schemas", topic, store)
    assert ensure_topic(broker, topic, PARTITIONS)
    ref = ReferenceTopic(PARTITIONS, partition_for)
    first = workload(store, 1_200, 41, START)
    second = workload(store, 500, 42, after(first))
    third = workload(store, 300, 43, after(second))
    send(broker, topic, ref, first)
    run_store(settings, store, once=True)

    plan = plan_json(settings, store)
    assert {f["field"]: f["strategy"] for f in plan["fields"]} == {
        "trades": "carry", "min_price": "carry", "max_price": "carry", "avg_price": "carry", "volume": "carry",
        "last_price": "replay", "price_range": "derive"}
    assert plan["build"] == "replay" and plan["dropped"] == ["sum_price"]

    steps.start(spark, settings, store, 2)
    send(broker, topic, ref, second)
    run_store(settings, store, once=True)  # the live version keeps ingesting
    send(broker, topic, ref, third)  # processed by neither before the cutover
    report = steps.cutover(spark, settings, store, wait_s=5)
    assert report.details["checks"]["success"] and report.details["checks"]["compared"] > 0
    assert read_record(settings, store).current == 2

    expected = expected_v2(store, ref.records)
    assert_state_equal(snapshot_rows(settings, store), expected)
    outcome = run(SPECS[store], ref.records)
    assert outcome.late  # the workload has late trades: v2 decided them as v1 does
    assert audit_totals(spark, settings, f"{store}.v2") == {"records_in": len(ref.records), "late": len(outcome.late)}

    v1 = outcome.state
    key = sorted({k for k, _s, _e in expected})[0]
    with TestClient(create_app(settings)) as client:
        new = client.get(f"/stores/{store}/keys/{key}/windows")
        old = client.get(f"/stores/{store}/keys/{key}/windows", params={"schema_version": 1})
    assert new.status_code == old.status_code == 200, (new.text, old.text)
    assert new.json()["meta"]["schema_version"] == 2 and old.json()["meta"]["schema_version"] == 1
    for row in new.json()["rows"]:
        want = expected[(key, row["window_start"], row["window_end"])]
        assert row["trades"] == want["trades"] and row["price_range"] == pytest.approx(want["price_range"])
    for row in old.json()["rows"]:  # v1's names; v2's additions absent; the dropped sum_price absent
        want = v1[(key, row["window_start"], row["window_end"])]
        assert row["count"] == want["count"] and row["volume"] == want["volume"]
        assert not {"trades", "last_price", "price_range", "sum_price"} & set(row)
    assert len(new.json()["rows"]) == len(old.json()["rows"]) == sum(1 for k, _s, _e in expected if k == key)


def late_strangers(ref: ReferenceTopic, store: str) -> list[tuple[bytes, bytes]]:
    """One click per partition from a user never seen, older than the partition's stream time by more
    than gap + grace: late for a store that knows the stream time, on time for one that does not."""
    spec = SPECS[store]
    times = run(spec, ref.records).stream_time
    out: dict[int, tuple[bytes, bytes]] = {}
    for i in range(200):
        key = f"stranger-{i}".encode()
        p = partition_for(key, PARTITIONS)
        if p in times and p not in out:
            ts = times[p] - spec.gap - spec.grace - 60_000
            out[p] = (key, json.dumps({"user_id": key.decode(), "page": "/home", "ts": ts}).encode())
    assert len(out) == len(times) == PARTITIONS
    return list(out.values())


def test_session_store_migrates_by_seed_with_the_live_stream_times(broker, spark, make_settings, tmp_path, topic):
    store = "user_sessions"
    settings = migration_settings(make_settings(), tmp_path / "schemas", topic, store)
    assert ensure_topic(broker, topic, PARTITIONS)
    ref = ReferenceTopic(PARTITIONS, partition_for)
    first = workload(store, 800, 51, START)
    send(broker, topic, ref, first)
    run_store(settings, store, once=True)

    plan = plan_json(settings, store)
    assert {f["field"]: f["strategy"] for f in plan["fields"]} == {
        "session_start": "carry", "session_end": "carry", "clicks": "carry", "last_page": "carry",
        "duration_ms": "derive"}
    assert plan["build"] == "seed"

    strangers = late_strangers(ref, store)
    second = strangers + workload(store, 400, 52, after(first))
    send(broker, topic, ref, second)
    report = steps.start(spark, settings, store, 2)
    assert report.details["seeded_rows"] == len(run(SPECS[store], ref.records[:len(first)]).state)
    run_store(settings, store, once=True)  # the live version takes the same records
    cut = steps.cutover(spark, settings, store, wait_s=5)
    assert cut.details["checks"]["success"] and cut.details["checks"]["compared"] > 0

    expected = expected_v2(store, ref.records)
    assert not {k for k, _s, _e in expected} & {k.decode() for k, _ in strangers}
    assert_state_equal(snapshot_rows(settings, store), expected)
    # v2's audit holds what it processed past the seed: the second batch, the strangers late in it.
    late_after_seed = [r for r in run(SPECS[store], ref.records).late if (r.key, r.value) in set(second)]
    assert {r.key for r in late_after_seed} >= {k for k, _ in strangers}
    assert audit_totals(spark, settings, f"{store}.v2") == {"records_in": len(second), "late": len(late_after_seed)}
