"""Old snapshot files go only after their last reader: a reader's lease (a shared flock held while its
connection is open) makes the publisher's keep-K retention skip the file, and the next publish after
the reader is done removes it. Real DuckDB files, published through the snapshot catalog."""

from __future__ import annotations

import dataclasses

from support.local_infra import make_home

from deltastate.config import Settings
from deltastate.service.snapshots import SnapshotPool
from deltastate.snapshot.catalog import snapshot_files
from deltastate.snapshot.generated import GeneratedStore, player_stats_sql, publish_generated
from deltastate.stores import load_store


def publish(settings: Settings, keys: int) -> int:
    store = load_store(settings, "player_stats")
    return publish_generated(settings, [GeneratedStore(store, lambda con: con.execute(
        f"INSERT INTO player_stats {player_stats_sql(keys)}"))]).version


def count(snap) -> int:
    return snap.con.execute("SELECT count(*) FROM player_stats").fetchall()[0][0]


def test_retention_waits_for_the_last_reader(session_settings: Settings, tmp_path) -> None:
    home = make_home(tmp_path / "leases")
    settings = dataclasses.replace(session_settings, home=home, storage_root=str(home / "data"), snapshot_keep=1)
    v1 = publish(settings, 10)
    pool = SnapshotPool(settings)
    with pool.lease() as old:
        assert old.version == v1 and count(old) == 10
        v2 = publish(settings, 20)  # keep=1 would delete v1, but a request is reading it
        assert list(snapshot_files(settings)) == [v1, v2]
        with pool.lease() as new:  # the next request moves to v2; the one in flight stays on v1
            assert new.version == v2 and count(new) == 20
        assert count(old) == 10
    v3 = publish(settings, 30)  # v1's reader is gone; v2 is still the pool's current snapshot
    assert list(snapshot_files(settings)) == [v2, v3]
    pool.close()  # nobody reads v2 any more
    v4 = publish(settings, 40)
    assert list(snapshot_files(settings)) == [v4]
    with pool.lease() as snap:
        assert snap.version == v4 and count(snap) == 40
    pool.close()
