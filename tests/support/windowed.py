"""Shared pieces of the window and session store tests: the seeded workloads (out of order within
grace, a few late beyond it, deletes, merging sessions), the published snapshot's entries, the
audit's totals and dead letters, and the comparison with a reference state."""

from __future__ import annotations

import math

import duckdb

from deltastate.ingest.timed_workloads import TimeShape, click_records, pulse_records, trade_records
from deltastate.snapshot.catalog import current_snapshot
from deltastate.stores import load_store


def workload(store: str, n: int, seed: int, start: int) -> list[tuple[bytes, bytes | None]]:
    """Out of order within grace, a few late beyond it; deletes for pulses; merges for sessions."""
    if store == "trade_stats":
        shape = TimeShape(start_ts=start, step_ms=15, disorder=0.2, disorder_ms=1_900, late=0.03, late_ms=8_000)
        return list(trade_records(n, 12, seed, shape))
    if store == "pulse_counts":
        shape = TimeShape(start_ts=start, step_ms=400, disorder=0.2, disorder_ms=4_000, late=0.03, late_ms=70_000)
        return list(pulse_records(n, 15, seed, shape, checkouts=0.02, tombstones=0.01))
    shape = TimeShape(start_ts=start, step_ms=60_000, disorder=0.3, disorder_ms=280_000, late=0.03, late_ms=2_400_000)
    return list(click_records(n, 25, seed, shape))


def snapshot_rows(settings, store: str) -> dict[tuple[str, int, int], dict]:
    names = [f.name for f in load_store(settings, store).value_fields]
    with duckdb.connect(str(current_snapshot(settings)), read_only=True) as con:
        rows = con.execute(f'SELECT key, window_start, window_end, {", ".join(names)} FROM "{store}"').fetchall()
    return {(r[0], r[1], r[2]): dict(zip(names, r[3:])) for r in rows}


def assert_state_equal(actual: dict, expected: dict) -> None:
    assert set(actual) == set(expected), (
        f"missing {sorted(set(expected) - set(actual))[:5]}, extra {sorted(set(actual) - set(expected))[:5]}")
    for entry, values in expected.items():
        for name, want in values.items():
            got = actual[entry][name]
            if isinstance(want, float):
                assert math.isclose(got, want, rel_tol=1e-9), (entry, name, got, want)
            else:
                assert got == want, (entry, name, got, want)


def audit_totals(spark, settings, store: str) -> dict:
    """The intake audit's records_in, applied, dead_lettered and late, summed over every batch."""
    return spark.read.format("delta").load(settings.table_path(store, "intake")).selectExpr(
        "sum(records_in) AS records_in", "sum(applied) AS applied", "sum(dead_lettered) AS dead_lettered",
        "sum(late) AS late").first().asDict()


def dead_letters(spark, settings, store: str, where: str) -> dict[tuple[int, int], tuple[bytes, bytes]]:
    """(partition, offset) -> raw (key, value) of the dead letters matching `where`."""
    return {(r["partition"], r["offset"]): (bytes(r["key"]), bytes(r["value"]))
            for r in spark.read.format("delta").load(settings.table_path(store, "deadletter"))
            .where(where).select("partition", "offset", "key", "value").collect()}
