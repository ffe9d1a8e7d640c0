"""One contract, every store type: what Kafka Streams users may rely on whatever the store.

It runs once per type (key-value, window, session). pulse_counts, the other window store, shares
trade_stats' code path; its null-value deletes and checkouts are compared with the reference in
test_windowed_stores.py.

- put/get: an event creates the key's entry, counted once;
- delete: a null value removes every entry of the key; later events start afresh;
- offset order: event, delete, event for one key in ONE micro-batch leaves exactly the last event;
- exactly once: a run with nothing new writes nothing; (batch, store key) is unique in the changelog;
- resume: a run starts from its lineage's newest audit row, as if it had summed the whole history.
"""

from __future__ import annotations

import json

import pytest
from support.store_checks import assert_resumes_from_newest_audit_row

from deltastate.changelog.layout import store_key_columns
from deltastate.engine import run_store
from deltastate.ingest.producer import ensure_topic, produce_records
from deltastate.query import Queries
from deltastate.snapshot import publish_snapshot
from deltastate.stores import list_stores, load_store

pytestmark = pytest.mark.integration
T0 = 1_700_000_000_000


def event(store: str, key: str, ts: int) -> bytes:
    doc = {
        "player_stats": {"player_id": key, "game_id": f"g{ts}", "score": 7, "ts": ts},
        "trade_stats": {"symbol": key, "price": 10.5, "qty": 3, "ts": ts},
        "pulse_counts": {"patient_id": key, "ts": ts},
        "user_sessions": {"user_id": key, "page": "/p", "ts": ts},
    }[store]
    return json.dumps(doc).encode()


# The value field that counts events, per store.
COUNTER = {"player_stats": "games", "trade_stats": "count", "pulse_counts": "beats", "user_sessions": "event_count"}


def entries(settings, store: str, key: str) -> list[dict]:
    queries = Queries(settings)
    definition = load_store(settings, store)
    if definition.type == "key_value":
        found = queries.sql(f"SELECT * FROM {store} WHERE key = '{key}'")
        return found.rows
    if definition.type == "session":
        return queries.sessions(store, key).rows
    return queries.windows(store, key).rows


ONE_STORE_PER_TYPE = ["player_stats", "trade_stats", "user_sessions"]


@pytest.mark.parametrize("store", ONE_STORE_PER_TYPE)
def test_store_contract(store, broker, spark, make_settings, topic, tmp_path):
    settings = make_settings()
    types = [load_store(settings, s).type for s in ONE_STORE_PER_TYPE]
    assert sorted(types) == sorted({load_store(settings, s).type for s in list_stores(settings)})  # each type once
    assert ensure_topic(broker, topic, 4)
    a, b = f"{store}-a", f"{store}-b"

    def batch(records) -> None:
        assert produce_records(broker, topic, records).delivered == len(records)
        run_store(settings, store, once=True, topic=topic)
        publish_snapshot(spark, settings, [load_store(settings, store)])

    # One micro-batch: a gets one event; b gets event, delete, event (offset order must hold).
    batch([(a.encode(), event(store, a, T0)), (b.encode(), event(store, b, T0)), (b.encode(), None),
           (b.encode(), event(store, b, T0 + 100))])
    got_a, got_b = entries(settings, store, a), entries(settings, store, b)
    assert [r[COUNTER[store]] for r in got_a] and all(r[COUNTER[store]] == 1 for r in got_a)
    assert [r[COUNTER[store]] for r in got_b] and all(r[COUNTER[store]] == 1 for r in got_b)

    # A later delete removes every entry of a; b is untouched.
    batch([(a.encode(), None)])
    assert entries(settings, store, a) == []
    assert [r[COUNTER[store]] for r in entries(settings, store, b)] == [r[COUNTER[store]] for r in got_b]

    # Nothing new: nothing written. Every (batch, store key) appears once.
    changelog = spark.read.format("delta").load(settings.table_path(store, "changelog"))
    before = changelog.count()
    run_store(settings, store, once=True, topic=topic)
    assert spark.read.format("delta").load(settings.table_path(store, "changelog")).count() == before
    keys = ["epoch", "batch_id", *store_key_columns(load_store(settings, store))]
    assert changelog.groupBy(*keys).count().where("count > 1").count() == 0
    # a's first event is back only if a new event arrives: it starts afresh.
    batch([(a.encode(), event(store, a, T0 + 200))])
    assert all(r[COUNTER[store]] == 1 for r in entries(settings, store, a)) and entries(settings, store, a)
    # The run that starts next resumes from the newest audit row alone.
    assert_resumes_from_newest_audit_row(spark, settings, store, tmp_path / "away")
