"""Window retention and session expiry on changelogs written with the real Delta writer: expired
entries get tombstones in the changelog (ordered after their last put, in the newest segment, named
by lineage_id), nothing else changes, reruns write nothing, and compaction afterwards keeps the state.

Stream time per partition comes from the intake audit's stream_times (max over batches). Expected
results are labelled by hand per entry below, not computed with the rule under test."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from deltastate.changelog import layout
from deltastate.changelog.reader import latest_state
from deltastate.changelog.tables import ensure_tables
from deltastate.maintenance import cleanup_store, compact_store
from deltastate.stores import load_store

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]
H = 3_600_000
M = 60_000
WRITTEN = datetime(2026, 1, 1, tzinfo=UTC)


def _append_changelog(spark, settings, store, rows: list[dict]) -> None:
    columns = layout.changelog_columns(store)
    full = []
    for r in rows:
        base = {name: None for name, _ in columns}
        base.update({"value_version": store.value_version, "lineage_id": "test-engine", "event_time": WRITTEN,
                     "write_time": WRITTEN})
        base.update(r)
        base[layout.SEGMENT] = layout.segment_of(base["epoch"], base["batch_id"])
        full.append(tuple(base[name] for name, _ in columns))
    df = spark.createDataFrame(full, layout.ddl(columns))
    df.write.format("delta").mode("append").save(settings.table_path(store.name, layout.CHANGELOG))


def _append_intake(spark, settings, store, stream_times: list[dict[str, int]]) -> None:
    rows = [("test-engine", i, 1, 1, 0, 0, "{}", 0, json.dumps(st), WRITTEN, None, None) for i, st in enumerate(stream_times)]
    spark.createDataFrame(rows, layout.ddl(layout.INTAKE_COLUMNS)).write.format("delta").mode("append").save(
        settings.table_path(store.name, layout.INTAKE))


def _entry(key: str, partition: int, start: int, end: int, batch: int, op: str = "put", **values) -> dict:
    return {"key": key, "window_start": start, "window_end": end, "source_partition": partition,
            "source_offset": batch * 10, "epoch": 0, "batch_id": batch, "op": op, **values}


def _live(spark, settings, store) -> set[tuple[str, int, int]]:
    return {(r["key"], r["window_start"], r["window_end"]) for r in latest_state(spark, settings, store).collect()}


def test_window_retention_tombstones_expired_windows(spark, make_settings) -> None:
    settings = make_settings()
    store = load_store(settings, "trade_stats")  # 5 s windows, grace 2 s, retention 1 h
    assert (store.window.grace_ms, store.window.retention_ms) == (2_000, H)
    ensure_tables(spark, settings, store)
    st0, st1 = 10 * H, 2 * H  # stream time of partitions 0 and 1; partition 3 has none
    v = {"count": 1, "sum_price": 1.0, "min_price": 1.0, "max_price": 1.0, "avg_price": 1.0, "volume": 1}
    # Kafka Streams' window store reads from its newest window start (st0) - retention + 1.
    entries = [  # (entry, expired?) labelled by hand
        (_entry("AAA", 0, st0 - H - 1_000, st0 - H + 4_000, 3, **v), True),  # ends after the horizon, starts before
        (_entry("AAA", 0, st0 - H, st0 - H + 5_000, 3, **v), True),  # starts exactly at it: gone, as in snapshots
        (_entry("AAA", 0, st0 - H + 1_000, st0 - H + 6_000, 3, **v), False),  # the next start: retained
        (_entry("AAA", 0, st0 - 5_000, st0, 4, **v), False),  # open
        (_entry("BBB", 1, 0, 30 * M, 1, **v), True),
        (_entry("BBB", 1, 30 * M, 30 * M + 5_000, 2, **v), True),
        (_entry("CCC", 3, 0, 5_000, 1, **v), False),  # no stream time for partition 3
    ]
    history = [
        _entry("BBB", 1, 0, 30 * M, 0, **{**v, "count": 0}),  # an older put of a window put again later
        _entry("DDD", 0, 0, 5_000, 1, **v), _entry("DDD", 0, 0, 5_000, 2, op="delete"),  # already deleted
    ]
    _append_changelog(spark, settings, store, history + [e for e, _ in entries])
    _append_intake(spark, settings, store, [{"0": st0 - H, "1": st1}, {"0": st0}, {"1": st1 - 5}])

    report = cleanup_store(settings, "trade_stats", spark=spark)

    gone = {(e["key"], e["window_start"], e["window_end"]) for e, dead in entries if dead}
    kept = {(e["key"], e["window_start"], e["window_end"]) for e, dead in entries if not dead}
    assert report.expired_windows == report.tombstones_written == len(gone) == 4
    assert _live(spark, settings, store) == kept
    changelog = spark.read.format("delta").load(settings.table_path(store.name, layout.CHANGELOG))
    tombs = changelog.where("lineage_id = 'deltastate-cleanup/window-retention'").collect()
    assert {(r["key"], r["window_start"], r["window_end"]) for r in tombs} == gone
    newest_segment = max(r[layout.SEGMENT] for r in changelog.select(layout.SEGMENT).collect())
    for t in tombs:  # after every record, in the newest segment, values null, provenance kept
        assert (t["op"], t["epoch"], t["batch_id"], t[layout.SEGMENT]) == ("delete", 0, 5, newest_segment)
        assert t["count"] is None and t["avg_price"] is None and t["source_partition"] in (0, 1)

    again = cleanup_store(settings, "trade_stats", spark=spark)
    assert again.expired_windows == 0 and again.read_version > report.read_version
    assert changelog.count() == len(history) + len(entries) + 4

    compacted = compact_store(settings, "trade_stats", spark=spark, vacuum=False)
    assert _live(spark, settings, store) == kept, compacted


def test_session_expiry_tombstones_expired_sessions(spark, make_settings) -> None:
    settings = make_settings()
    store = load_store(settings, "user_sessions")  # gap 30 min, grace 5 min, retention 24 h
    assert (store.session.grace_ms, store.session.retention_ms) == (5 * M, 24 * H)
    ensure_tables(spark, settings, store)
    st = 100 * H
    v = {"session_start": 0, "session_end": 0, "event_count": 1, "last_page": "/"}
    entries = [
        (_entry("u1", 0, 10 * H, 20 * H, 1, **v), True),
        (_entry("u1", 0, st - 24 * H - 2 * M, st - 24 * H - 1, 2, **v), True),
        (_entry("u1", 0, st - 24 * H - M, st - 24 * H, 2, **v), True),  # ends exactly at the horizon
        (_entry("u4", 0, st - 24 * H - M, st - 24 * H + 1, 2, **v), False),  # 1 ms after it
        (_entry("u2", 1, 10 * H, 20 * H, 2, **v), False),  # partition 1 is young: stream time 21 h
        (_entry("u3", 0, st - M, st, 2, **v), False),
    ]
    _append_changelog(spark, settings, store, [e for e, _ in entries])
    _append_intake(spark, settings, store, [{"0": st, "1": 21 * H}])

    report = cleanup_store(settings, "user_sessions", spark=spark)

    assert report.expired_sessions == report.tombstones_written == 3 and report.expired_windows == 0
    assert _live(spark, settings, store) == {(e["key"], e["window_start"], e["window_end"])
                                             for e, dead in entries if not dead}
    changelog = spark.read.format("delta").load(settings.table_path(store.name, layout.CHANGELOG))
    assert changelog.where("lineage_id = 'deltastate-cleanup/session-expiry' AND op = 'delete'").count() == 3
    assert cleanup_store(settings, "user_sessions", spark=spark).expired_sessions == 0
