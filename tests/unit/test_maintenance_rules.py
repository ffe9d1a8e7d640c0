"""The pure decision rules of compaction and cleanup, alone (the integration tests drive them through
real Delta tables and a real broker)."""

from __future__ import annotations

from deltastate.maintenance.cleanup import CleanupReport
from deltastate.maintenance.compact import CompactionReport
from deltastate.maintenance.stats import TableFigures, dirty_ratio, expired, should_compact
from deltastate.maintenance.ttl import TailRecord, raced_keys, spared_keys
from deltastate.maintenance.vacuum import parse_interval_hours
from deltastate.stores.durations import parse_duration_ms


def test_dirty_ratio_and_gate() -> None:
    assert dirty_ratio(0, 0) == 0.0
    assert dirty_ratio(3, 4) == 0.75
    assert should_compact(0, 0, 0, 0.5) == "empty changelog"
    assert "dirty ratio 0.400 < min_cleanable_dirty_ratio 0.5" in should_compact(4, 4, 10, 0.5)
    assert should_compact(5, 5, 10, 0.5) is None  # at the threshold: compact (Kafka: >=)
    assert "nothing droppable" in should_compact(8, 0, 10, 0.5)
    assert should_compact(1, 1, 10, 0.0) is None


def test_expiry_is_strictly_older() -> None:
    assert expired(last_ms=899, now=1_000, age_ms=100)
    assert not expired(last_ms=900, now=1_000, age_ms=100)


def test_tail_spares_touched_and_pending_keys_and_finds_races() -> None:
    tail = [TailRecord(0, 10, "a", False), TailRecord(1, 3, "b", True), TailRecord(1, 4, None, False)]
    assert spared_keys(tail) == {"a", "b"}
    placed = {"x": (0, 20), "y": (1, 7)}
    after = [TailRecord(0, 19, "x", False),  # before x's tombstone: raced
             TailRecord(0, 21, "x", False),  # after it: a fresh start, fine
             TailRecord(1, 6, "y", True),  # another cleanup's tombstone: not a race
             TailRecord(1, 5, "z", False)]  # not expired
    assert raced_keys(after, placed) == ["x"]


def test_interval_and_ttl_parsing() -> None:
    assert parse_interval_hours("interval 7 days") == 168.0
    assert parse_interval_hours("interval 1 day 12 hours") == 36.0
    assert parse_interval_hours("interval 30 minutes") == 0.5
    assert parse_interval_hours("7 fortnights") is None
    assert parse_interval_hours(None) is None
    assert parse_duration_ms("7d") == 7 * 86_400_000  # a store's `ttl: 7d`


def test_reports_serialise() -> None:
    fig = TableFigures(3, 10, 2, 500)
    data = CompactionReport("s", 3, fig, fig, superseded=4, dirty_ratio_before=0.4, skipped="x").to_dict()
    assert data["before"] == {"version": 3, "records": 10, "files": 2, "bytes": 500} and data["skipped"] == "x"
    cleanup = CleanupReport("s", "key_value", 1, expired_keys=2, raced=("k",)).to_dict()
    assert cleanup["expired_keys"] == 2 and cleanup["raced"] == ["k"]
