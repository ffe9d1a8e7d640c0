"""Publishes a new global DuckDB snapshot of the stores' state, built from their Delta changelogs.

Steps, under an exclusive lock so publishers run one at a time:
 1. build the candidate: version = newest published version + 1; snapshot-<version>.duckdb under a
    temp name: one table per store (key PRIMARY KEY, typed value columns, provenance columns) loaded
    from latest_state(...) at a pinned changelog version (a store without changelog: from its Spark
    state store at the newest committed batch, engine/keyvalue/state_read.py), plus the _snapshot and _snapshot_stores
    tables; checkpoint, close, fsync;
 2. validate it: the caller's check (the quality gate) reads the candidate file itself and raises
    to refuse it, in which case the candidate is deleted and nothing else changes;
 3. promote it: rename it to its final name, point CURRENT at it (atomic os.replace), then delete
    snapshots beyond settings.snapshot_keep.
A crash at any step leaves the previous snapshot current and complete.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deltastate import metrics
from deltastate.changelog import intake
from deltastate.changelog.layout import (
    BATCH_ID,
    CHANGELOG,
    EVENT_TIME,
    SOURCE_OFFSET,
    SOURCE_PARTITION,
    WRITE_TIME,
    store_key_columns,
)
from deltastate.changelog.reader import latest_commit, latest_state
from deltastate.changelog.rules import retained_column, retention_horizon
from deltastate.config import Settings
from deltastate.errors import SnapshotError
from deltastate.snapshot.catalog import (
    LOCK_FILE,
    META_DDL,
    META_TABLE,
    STORES_DDL,
    TEMP_MARK,
    SnapshotInfo,
    StoreSnapshot,
    current_snapshot,
    current_version,
    fsync_dir,
    insert_store_row,
    prune,
    read_info,
    read_pointer,
    read_store_rows,
    snapshot_files,
    snapshot_name,
    write_pointer,
)
from deltastate.snapshot.read_index import build_read_index, index_dir, remove_index
from deltastate.stores import list_stores, load_store
from deltastate.stores.backends import FROM_STATE_STORE, backend_of
from deltastate.stores.definition import StoreDefinition

if TYPE_CHECKING:
    import duckdb
    from pyspark.sql import SparkSession

DUCKDB_TYPES = {"long": "BIGINT", "double": "DOUBLE", "string": "VARCHAR"}
# The store-key columns' Spark types (StoreBackend.key_column_types) in DuckDB.
_DUCKDB_KEY_TYPES = {"string": "VARCHAR", "bigint": "BIGINT"}
# Provenance columns kept per key in a snapshot table, after the value columns.
PROVENANCE: tuple[tuple[str, str], ...] = (
    (SOURCE_PARTITION, "INTEGER"),
    (SOURCE_OFFSET, "BIGINT"),
    (BATCH_ID, "BIGINT"),
    (EVENT_TIME, "TIMESTAMP"),  # naive UTC
    (WRITE_TIME, "TIMESTAMP"),
)


def quote(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'


def table_columns(store: StoreDefinition) -> list[tuple[str, str]]:
    """(name, DuckDB type) of the store's snapshot table, key first."""
    keys = [(name, _DUCKDB_KEY_TYPES[t]) for name, t in backend_of(store).key_column_types]
    values = [(f.name, DUCKDB_TYPES[f.type]) for f in store.value_fields]
    return [*keys, *values, *PROVENANCE]


def table_ddl(store: StoreDefinition) -> str:
    """Primary key: the store key (key, plus the window or session bounds where the store has them)."""
    cols = [f"{quote(n)} {t}" for n, t in table_columns(store)]
    pk = ", ".join(quote(c) for c in store_key_columns(store))
    return f"CREATE TABLE {quote(store.name)} ({', '.join(cols)}, PRIMARY KEY ({pk}))"


def _retained(spark: SparkSession, settings: Settings, store: StoreDefinition, state):
    """(state, intake version, stream times JSON): window and session entries the store no longer
    retains at the partition's stream time have left it (changelog/rules.py; cleanup writes their
    tombstones). The intake version and times are recorded so that a fresh read can advance the
    horizon from there (query/fresh.py)."""
    from pyspark.sql import functions as F

    spec = backend_of(store).retention_spec(store)
    if spec is None:
        return state, None, None
    version = intake.intake_version(spark, settings, store)
    times = {} if version is None else intake.stream_times(spark, settings, store, intake_version=version)
    recorded = json.dumps({str(p): ms for p, ms in sorted(times.items())})
    if not times:
        return state, version, recorded
    pairs = [c for p, ms in sorted(times.items()) for c in (F.lit(p), F.lit(retention_horizon(spec, ms)))]
    horizon = F.element_at(F.create_map(*pairs), F.col(SOURCE_PARTITION))
    return state.where(horizon.isNull() | (F.col(retained_column(spec)) > horizon)), version, recorded


@contextmanager
def publish_lock(settings: Settings) -> Iterator[None]:
    settings.snapshots_dir.mkdir(parents=True, exist_ok=True)
    with open(settings.snapshots_dir / LOCK_FILE, "a") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def _utc_naive(ts: datetime | None) -> datetime | None:
    if ts is None or ts.tzinfo is None:
        return ts
    return ts.astimezone(UTC).replace(tzinfo=None)


def _load_store(con: duckdb.DuckDBPyConnection, spark: SparkSession, settings: Settings,
                store: StoreDefinition) -> StoreSnapshot:
    """Create the store's table and fill it from the changelog pinned at its latest version."""
    con.execute(table_ddl(store))
    intake_version, times = None, None
    if backend_of(store).snapshot_source == FROM_STATE_STORE:
        # No changelog: the state store at the query's newest committed batch (no changelog version).
        from deltastate.engine.keyvalue.state_read import read_state  # pyspark stays off the read path

        unlogged = read_state(spark, settings, store)
        version, committed_at = None, unlogged.committed_at
        if unlogged.rows is not None:
            _insert(con, store, unlogged.rows)
    else:
        path = settings.table_path(store.storage, CHANGELOG)
        latest = latest_commit(spark, path)
        version, committed_at = (None, None) if latest is None else (latest[0], _utc_naive(latest[1]))
        if version is not None:
            # Pinned: the stream may commit meanwhile; the recorded version must match the rows loaded.
            state, intake_version, times = _retained(spark, settings, store,
                                                     latest_state(spark, settings, store, version))
            _insert(con, store, state)
    [(rows,)] = con.execute(f"SELECT count(*) FROM {quote(store.name)}").fetchall()
    return StoreSnapshot(store.name, store.type, version, committed_at, int(rows), intake_version, times,
                         store.value_version)


def _insert(con: duckdb.DuckDBPyConnection, store: StoreDefinition, state) -> None:
    names = [n for n, _ in table_columns(store)]
    con.register("_incoming", state.select(*names).toArrow())
    try:
        cols = ", ".join(quote(n) for n in names)
        con.execute(f"INSERT INTO {quote(store.name)} ({cols}) SELECT {cols} FROM _incoming")
    finally:
        con.unregister("_incoming")


def _carry_forward(con: duckdb.DuckDBPyConnection, previous: Path, skip: set[str],
                   declared: set[str]) -> list[StoreSnapshot]:
    """Copy the tables (and their metadata rows) of still-declared stores that this publish does not
    rebuild from the previous snapshot, so publishing a subset never drops the other stores."""
    import duckdb

    carried = []
    prev = duckdb.connect(str(previous), read_only=True)
    try:
        for info in read_store_rows(prev):
            if info.store in skip or info.store not in declared:
                continue
            # fetchall, not fetchone: DuckDB 2.0 refuses prev.sql() while an execute() result is unfinished.
            [(ddl,)] = prev.execute("SELECT sql FROM duckdb_tables() WHERE database_name = current_database() "
                                    "AND schema_name = 'main' AND table_name = ?", [info.store]).fetchall()
            con.execute(ddl)
            con.register("_incoming", prev.sql(f"SELECT * FROM {quote(info.store)}").to_arrow_table())
            try:
                con.execute(f"INSERT INTO {quote(info.store)} SELECT * FROM _incoming")
            finally:
                con.unregister("_incoming")
            carried.append(info)
    finally:
        prev.close()
    return carried


def _write_metadata(con: duckdb.DuckDBPyConnection, version: int, published_at: datetime,
                    stores: list[StoreSnapshot]) -> None:
    con.execute(META_DDL)
    con.execute(f"INSERT INTO {META_TABLE} VALUES (?, ?)", [version, published_at])
    con.execute(STORES_DDL)
    for s in stores:
        insert_store_row(con, s)


StoreBuilder = Callable[["duckdb.DuckDBPyConnection"], list[StoreSnapshot]]
CandidateCheck = Callable[[SnapshotInfo], None]


def publish_snapshot(spark: SparkSession, settings: Settings,
                     stores: list[StoreDefinition] | None = None, *,
                     check: CandidateCheck | None = None) -> SnapshotInfo:
    """Build, validate (with `check`, when given) and promote the next snapshot; return its metadata.

    stores=None snapshots every declared store. With a list, those stores are rebuilt from their
    changelogs and the other declared stores are carried over unchanged from the current snapshot.
    `check` gets the candidate's metadata (its path is the candidate file) and raises to refuse it.
    """
    partial = stores is not None
    chosen = list(stores) if stores is not None else [load_store(settings, n) for n in list_stores(settings)]
    names = [s.name for s in chosen]
    if len(set(names)) != len(names):
        raise SnapshotError(f"a store is listed twice: {', '.join(names)}")

    def build(con: duckdb.DuckDBPyConnection) -> list[StoreSnapshot]:
        built = [_load_store(con, spark, settings, s) for s in chosen]
        carry_from = current_snapshot(settings) if partial and read_pointer(settings) else None
        if carry_from is not None:
            built += _carry_forward(con, carry_from, set(names), set(list_stores(settings)))
        return built

    return metrics.record_snapshot(settings, publish_built(settings, build, check=check))


def publish_built(settings: Settings, build: StoreBuilder, *, check: CandidateCheck | None = None,
                  published_at: datetime | None = None) -> SnapshotInfo:
    """The publishing pipeline (module doc) around `build`, which creates and fills the store
    tables of the candidate and returns their metadata rows."""
    import duckdb

    with publish_lock(settings):
        folder = settings.snapshots_dir
        version = max([0, *snapshot_files(settings), current_version(settings) or 0]) + 1
        final = folder / snapshot_name(version)
        tmp = folder / f".{final.name}{TEMP_MARK}{os.getpid()}"
        stamp = published_at or datetime.now(UTC).replace(tzinfo=None)
        try:
            con = duckdb.connect(str(tmp))
            try:
                # Spark hands timestamps over as UTC instants; keep them as naive UTC whatever the host zone.
                con.execute("SET TimeZone = 'UTC'")
                built = build(con)
                _write_metadata(con, version, stamp, sorted(built, key=lambda s: s.store))
                con.execute("CHECKPOINT")
            finally:
                con.close()
            with open(tmp, "rb") as fh:
                os.fsync(fh.fileno())
            if check is not None:
                check(read_info(tmp))
            declared = set(list_stores(settings))
            build_read_index(tmp, [load_store(settings, s.store) for s in built if s.store in declared],
                             index_dir(tmp))
            os.replace(index_dir(tmp), index_dir(final))  # the index first: a promoted file has its index
            os.replace(tmp, final)
            fsync_dir(folder)
        except duckdb.Error as exc:
            raise SnapshotError(f"building snapshot {version} in {folder} failed: {exc}") from exc
        finally:
            for leftover in (tmp, tmp.with_name(tmp.name + ".wal")):
                leftover.unlink(missing_ok=True)
            remove_index(tmp)
        write_pointer(settings, final.name)
        prune(settings, settings.snapshot_keep)
        return read_info(final, current=True)  # under the lock: another publish could prune it


def describe(info: SnapshotInfo) -> dict[str, Any]:
    """A JSON-ready view of a SnapshotInfo."""
    iso = lambda ts: None if ts is None else ts.isoformat() + "Z"  # noqa: E731
    return {
        "snapshot_version": info.version, "file": info.path.name, "current": info.current,
        "published_at": iso(info.published_at),
        "stores": [{"store": s.store, "store_type": s.store_type, "changelog_version": s.changelog_version,
                    "changelog_committed_at": iso(s.changelog_committed_at), "row_count": s.row_count}
                   for s in info.stores],
    }
