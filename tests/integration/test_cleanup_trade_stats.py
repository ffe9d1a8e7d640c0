"""Window retention through a real trade_stats run (real broker, Spark, Delta): trades 2 h apart on
some partitions push their stream time past the 1 h retention, cleanup tombstones exactly the windows
whose partition's stream time (computed here from the produced trades) has passed, and the next run
of the stream neither brings them back nor trips over the tombstones."""

from __future__ import annotations

import json

import pytest
from support.store_checks import produce

from deltastate.changelog.reader import latest_state
from deltastate.engine import run_store
from deltastate.ingest.partitioner import partition_for
from deltastate.ingest.producer import ensure_topic
from deltastate.maintenance import cleanup_store
from deltastate.stores import load_store

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1200)]
STORE = "trade_stats"
T0 = 1_700_000_000_000
H = 3_600_000


def _trade(symbol: str, ts: int, price: float = 10.0) -> tuple[bytes, bytes]:
    return symbol.encode(), json.dumps({"symbol": symbol, "price": price, "qty": 1, "ts": ts}).encode()


def _windows(spark, settings, store) -> set[tuple[str, int, int]]:
    return {(r["key"], r["window_start"], r["window_end"]) for r in latest_state(spark, settings, store).collect()}


def test_trade_stats_window_retention_through_a_real_run(broker: str, spark, make_settings, topic: str) -> None:
    settings = make_settings()
    store = load_store(settings, STORE)
    parts = store.source.partitions
    assert ensure_topic(broker, topic, parts) is True
    symbols = [f"SYM{i}" for i in range(8)]
    partition = {s: partition_for(s, parts) for s in symbols}
    movers = {s for s in symbols if partition[s] in {partition[symbols[0]], partition[symbols[1]]}}
    assert movers and movers != set(symbols)
    early = [_trade(s, T0 + 10_000 + 700 * i) for i in range(6) for s in symbols]
    later = [_trade(s, T0 + 2 * H + 1_000 * i) for i in range(3) for s in sorted(movers)]
    produce(settings, topic, early + later)
    run_store(settings, STORE, once=True, topic=topic)

    before = _windows(spark, settings, store)
    assert {k for k, _, _ in before} == set(symbols)
    # Stream time per partition from what was produced; a window goes once closed and past retention.
    stream_time: dict[int, int] = {}
    for key, value in early + later:
        p = partition[key.decode()]
        stream_time[p] = max(stream_time.get(p, 0), json.loads(value)["ts"])
    grace, retention = store.window.grace_ms, store.window.retention_ms
    gone = {w for w in before if w[2] + grace <= stream_time[partition[w[0]]]
            and w[2] < stream_time[partition[w[0]]] - retention}
    assert gone and {k for k, _, _ in gone} == movers  # only the movers' early windows

    report = cleanup_store(settings, STORE, spark=spark)

    assert report.expired_windows == report.tombstones_written == len(gone)
    assert _windows(spark, settings, store) == before - gone
    assert cleanup_store(settings, STORE, spark=spark).expired_windows == 0

    # The stream goes on: a new trade opens new windows; the expired ones stay gone.
    mover = sorted(movers)[0]
    produce(settings, topic, [_trade(mover, T0 + 2 * H + 10_000, 20.0)])
    run_store(settings, STORE, once=True, topic=topic)
    after = _windows(spark, settings, store)
    assert not after & gone
    assert before - gone <= after
    assert any(w[0] == mover and w[1] <= T0 + 2 * H + 10_000 < w[2] for w in after)
