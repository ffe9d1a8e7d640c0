"""The retention horizon of a fresh read (query/fresh.py): the snapshot's recorded stream times,
advanced by the intake audit rows committed after the intake version it recorded; on hand-written
Delta logs and parquet files."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from test_changelog_deltalog import add, commit

from deltastate.changelog.deltalog import DeltaLog
from deltastate.changelog.layout import INTAKE
from deltastate.config import load_settings
from deltastate.query.fresh import Overlay, _horizon, _with_newer_horizon
from deltastate.snapshot.catalog import StoreSnapshot
from deltastate.stores import load_store


def audit_file(table: Path, name: str, stream_times: list[str | None]) -> None:
    table.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"batch_id": list(range(len(stream_times))), "stream_times": stream_times}), table / name)


def test_the_horizon_advances_from_the_snapshots_stream_times(tmp_path: Path) -> None:
    settings = load_settings({"DELTASTATE_HOME": str(tmp_path)})
    store = load_store(settings, "user_sessions")
    retention = store.session.retention_ms
    intake = Path(settings.table_path(store.name, INTAKE))
    # Version 0 is what the snapshot already holds: its times must not be read again.
    audit_file(intake, "a.parquet", ['{"0": 99999}'])
    commit(intake, 0, add("a.parquet"))
    audit_file(intake, "b.parquet", ['{"0": 900, "2": 40}', None, '{"0": 700}'])
    commit(intake, 1, add("b.parquet"))
    snapshot = StoreSnapshot(store.name, "session", 7, None, 3, 0, '{"0": 100, "1": 500}')

    horizon = _horizon(settings, DeltaLog(ttl=0), snapshot, store, None)[0]
    assert horizon == {0: 900 - retention, 1: 500 - retention, 2: 40 - retention}
    # Nothing audited since the snapshot: its own times.
    caught_up = dataclasses.replace(snapshot, intake_version=1)
    assert _horizon(settings, DeltaLog(ttl=0), caught_up, store, None)[0] == {0: 100 - retention, 1: 500 - retention}
    # A snapshot from before the times were recorded keeps the horizon it was published with.
    older = StoreSnapshot(store.name, "session", 7, None, 3)
    assert _horizon(settings, DeltaLog(ttl=0), older, store, None)[0] is None
    # A store that was empty at publish: every intake commit counts.
    empty = StoreSnapshot(store.name, "session", None, None, 0)
    assert _horizon(settings, DeltaLog(ttl=0), empty, store, None)[0] == {0: 99999 - retention, 2: 40 - retention}

    # An overlay extended later advances its own times by the intake commits after its version alone.
    audit_file(intake, "c.parquet", ['{"1": 800}'])
    commit(intake, 2, add("c.parquet"))
    horizon, times, reached = _horizon(settings, DeltaLog(ttl=0), snapshot, store, None)
    assert (times, reached) == ({0: 900, 1: 800, 2: 40}, 2)
    earlier = Overlay(store.name, None, 7, 7, stream_times={0: 50, 1: 500}, intake_version=1)
    horizon, times, reached = _horizon(settings, DeltaLog(ttl=0), snapshot, store, earlier)
    assert (horizon, reached) == ({0: 50 - retention, 1: 800 - retention}, 2)

    # An overlay as new as the changelog still takes the audits copied to the intake after it was built.
    built = Overlay(store.name, None, 7, 9, {0: 50 - retention}, {0: 50}, 2)
    assert _with_newer_horizon(settings, DeltaLog(ttl=0), snapshot, store, built) is built
    audit_file(intake, "d.parquet", ['{"0": 60}'])
    commit(intake, 3, add("d.parquet"))
    advanced = _with_newer_horizon(settings, DeltaLog(ttl=0), snapshot, store, built)
    assert (advanced.horizon, advanced.intake_version, advanced.to_version) == ({0: 60 - retention}, 3, 9)


def test_key_value_stores_have_no_horizon(tmp_path: Path) -> None:
    settings = load_settings({"DELTASTATE_HOME": str(tmp_path)})
    store = load_store(settings, "player_stats")
    assert _horizon(settings, DeltaLog(ttl=0), StoreSnapshot(store.name, "key_value", 1, None, 1), store, None)[0] is None
