"""The read index answers exactly what DuckDB answers over the same published snapshot file: every
key's row, top N and every key's rank for each numeric column (with many ties), for short keys (the
vectorised path) and for keys with unusual bytes (long, unicode, NUL: the byte-offset path)."""

from __future__ import annotations

import dataclasses
import random

import duckdb
import pytest
from support.local_infra import make_home

from deltastate.query.reads import Queries
from deltastate.snapshot.generated import GeneratedStore, player_stats_sql, publish_generated
from deltastate.snapshot.read_index import index_dir, load_index
from deltastate.stores import load_store

pytestmark = pytest.mark.integration
STORE = "player_stats"
KEYS = 200_000
ODD_KEYS = ["", "ü", "üü", "a", "z" * 300, "z" * 299 + "y", "玩家-1", "玩家-2", "\U0001f3ae",
            "player-000000001 ", "Player-000000001", "player-00000000", "\t", "~", "\x7f"]


def publish(settings, sql: str):
    store = load_store(settings, STORE)
    return publish_generated(settings, [GeneratedStore(store, lambda con: con.execute(f"INSERT INTO {STORE} {sql}"))])


def odd_rows_sql() -> str:
    values = ", ".join(
        f"('{k.replace(chr(39), chr(39) * 2)}', {i % 3}, {i % 2}, 7, {1000 + i}, 0, {i}, 0, TIMESTAMP '2026-01-01', "
        "TIMESTAMP '2026-01-02')" for i, k in enumerate(ODD_KEYS))
    return f"SELECT * FROM (VALUES {values}) t"


@pytest.fixture(scope="module")
def snapshots(session_settings, tmp_path_factory):
    home = make_home(tmp_path_factory.mktemp("read-index"))
    settings = dataclasses.replace(session_settings, home=home, storage_root=str(home / "data"), snapshot_keep=5)
    # games in 1..50 and best_score in 0..9999 over 200,000 keys: thousands of ties per value.
    short = publish(settings, player_stats_sql(KEYS, seed=3))
    odd = publish(settings, f"{player_stats_sql(2_000, seed=4)} UNION ALL {odd_rows_sql()} UNION ALL "
                            "SELECT 'a' || chr(0) || 'b', 1, 2, 3, 4, 0, 0, 0, NULL, NULL UNION ALL "
                            "SELECT repeat('k', 100) || i, i % 5, i, i, i, 0, i, 0, NULL, NULL FROM range(50) t(i)")
    return settings, short, odd


def duck(path, sql: str, params=()):
    con = duckdb.connect(str(path), read_only=True)
    try:
        cur = con.execute(sql, list(params))
        names = [d[0] for d in cur.description]
        return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]
    finally:
        con.close()


@pytest.mark.parametrize("which", ["short", "odd"])
def test_index_rows_top_and_rank_equal_duckdb(snapshots, which):
    settings, short, odd = snapshots
    info = short if which == "short" else odd
    index = load_index(info.path, STORE)
    assert index is not None and index_dir(info.path).is_dir()
    assert (index_dir(info.path) / f"{STORE}.keys.fixed.npy").is_file() == (which == "short")
    everything = duck(info.path, f'SELECT * FROM {STORE} ORDER BY "key"')
    assert index.rows == len(everything)
    # Every key: found at its own row, with DuckDB's values (types included).
    keys = [r["key"] for r in everything]
    positions = index.find_many(keys)
    assert positions == [index.find(k) for k in keys] and sorted(positions) == list(range(len(keys)))
    assert index.rows_at(positions) == everything
    assert index.find("no such key") is None and index.find_many(["no such key", keys[0]]) == [None, 0]
    store = load_store(settings, STORE)
    for column in store.numeric_columns:
        ranked = duck(info.path, f'SELECT "key", row_number() OVER (ORDER BY "{column}" DESC NULLS LAST, "key" ASC) '
                                 f'AS rank FROM {STORE} ORDER BY rank')
        assert index.top(column, 100) == duck(info.path, f'SELECT * FROM {STORE} ORDER BY "{column}" DESC NULLS LAST, '
                                                         f'"key" ASC LIMIT 100')
        want = {r["key"]: r["rank"] for r in ranked}
        assert [index.rank(column, p) for p in positions] == [want[k] for k in keys], column


def test_reads_through_the_index_equal_the_sql_path(snapshots):
    settings, _, odd = snapshots
    rng = random.Random(9)
    with Queries(settings) as queries:
        # The current snapshot is `odd`; an overlay-free read uses its index.
        sample = rng.sample([r["key"] for r in duck(odd.path, f"SELECT key FROM {STORE}")], 300) + ["a\x00b", "z" * 300]
        for key in sample:
            assert queries.get(STORE, key).rows == duck(odd.path, f'SELECT * FROM {STORE} WHERE "key" = ?', [key])
            rank = queries.rank(STORE, key, by="total_score").row
            assert rank == duck(odd.path, f'SELECT rank, "key", total_score FROM (SELECT "key", total_score, row_number() '
                                          f'OVER (ORDER BY total_score DESC NULLS LAST, "key" ASC) AS rank FROM {STORE}) '
                                          'WHERE "key" = ?', [key])[0]
        asked = [sample[0], "missing-1", sample[1], sample[0], "missing-2"]
        many = queries.get_many(STORE, asked)
        assert [r["key"] for r in many.rows] == [sample[0], sample[1], sample[0]]


@pytest.mark.parametrize("which", ["short", "odd"])
def test_partition_scoped_reads_equal_duckdb_over_those_partitions(snapshots, which):
    """What an instance of a query tier answers for some partitions: only their keys are found, and
    top and the count above a key are DuckDB's over their rows."""
    settings, short, odd = snapshots
    info = short if which == "short" else odd
    index = load_index(info.path, STORE)
    assert index is not None and index.partitioned
    rng = random.Random(11)
    everything = duck(info.path, f'SELECT * FROM {STORE} ORDER BY "key"')
    keys = [r["key"] for r in everything]
    partition_of = {r["key"]: r["source_partition"] for r in everything}
    for scope in ({0}, {1, 3}, {0, 1, 2, 3}):
        found = index.find_many(keys, scope)
        assert [k for k, i in zip(keys, found, strict=True) if i is not None] == \
            [k for k in keys if partition_of[k] in scope]
        listed = ", ".join(map(str, sorted(scope)))
        for column in ("total_score", "games"):
            want = duck(info.path, f'SELECT * FROM {STORE} WHERE source_partition IN ({listed}) '
                                   f'ORDER BY "{column}" DESC NULLS LAST, "key" ASC LIMIT 150')
            assert index.top(column, 150, scope) == want, (scope, column)
            for row in rng.sample(everything, 40):
                value = row[column]
                above = duck(info.path, f'SELECT count(*) AS n FROM {STORE} WHERE source_partition IN ({listed}) AND '
                                        f'(("{column}" > ? OR ("{column}" = ? AND "key" < ?)) OR '
                                        f'(? IS NULL AND ("{column}" IS NOT NULL OR "key" < ?)))',
                             [value, value, row["key"], value, row["key"]])[0]["n"]
                assert index.count_above(column, value, row["key"], scope) == above, (scope, column, row["key"])


def test_pruning_removes_a_version_with_its_index(snapshots):
    settings, short, odd = snapshots
    assert index_dir(short.path).is_dir()
    for _ in range(settings.snapshot_keep):
        publish(settings, player_stats_sql(10, seed=5))
    assert not short.path.exists() and not index_dir(short.path).exists()
    assert not [p for p in settings.snapshots_dir.iterdir() if p.name.endswith(".index")
                and not (settings.snapshots_dir / p.name.removesuffix(".index")).exists()]
