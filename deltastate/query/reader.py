"""Read-only, locked-down DuckDB connections to the current snapshot.

Each thread keeps one connection and reuses it while CURRENT names the same file; a publish makes
the next read reopen on the new file. A read runs entirely on one file, so it sees one complete
snapshot even while publishes and retention happen underneath (an unlinked file stays readable
through connections already open on it).

Each open snapshot holds a shared flock on its file (leases.py) until it is closed: the publisher's
retention skips a file somebody still reads, so old files go only after their last reader is done.

Within one process DuckDB shares a database instance between all connections to the same file, and
settings such as enable_external_access are global to that instance: the first connection locks the
instance down, later ones find it locked and only verify it.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from deltastate.config import Settings
from deltastate.errors import SnapshotError
from deltastate.query.leases import Lease, take_lease
from deltastate.snapshot.catalog import META_TABLE, CurrentPointer, StoreSnapshot, read_store_rows
from deltastate.snapshot.read_index import StoreIndex, load_index

if TYPE_CHECKING:
    import duckdb

# Run in this order on a fresh instance; lock_configuration last, after which no SET is accepted.
LOCKDOWN = (
    "SET enable_external_access = false",  # no file reads/writes (read_csv, COPY, ATTACH), no extensions
    "SET python_enable_replacements = false",  # no scanning of Python variables by name
    "SET lock_configuration = true",
)
OPEN_ATTEMPTS = 5
_OPEN_LOCK = threading.Lock()


@dataclass(eq=False)
class Snapshot:
    """One open snapshot: its version, its file, the stores it holds and a read-only connection.

    published_at and store_info (per store: changelog version and commit time, row count) come from
    the snapshot's metadata tables, read once at open; they say how fresh every answer is."""

    version: int
    path: Path
    identity: tuple[str, int]
    stores: frozenset[str]
    con: duckdb.DuckDBPyConnection
    published_at: datetime | None = None  # naive UTC
    store_info: dict[str, StoreSnapshot] = field(default_factory=dict)
    lease: Lease | None = None
    use_index: bool = True
    _indexes: dict[str, StoreIndex | None] = field(default_factory=dict, repr=False)

    def index(self, store: str) -> StoreIndex | None:
        """The read index of `store` in this version (query/index.py), loaded on first use; None when
        the version has none for it (a window or session store, or a snapshot built without one)."""
        try:
            return self._indexes[store]
        except KeyError:
            found = load_index(self.path, store) if self.use_index and store in self.stores else None
            self._indexes[store] = found  # two threads may both load it: the same read-only maps
            return found

    def close(self) -> None:
        """Close the connection, then let retention delete the file (the order matters)."""
        try:
            self.con.close()
        finally:
            if self.lease is not None:
                self.lease.release()


def _identity(path: Path) -> tuple[str, int]:
    return path.name, os.stat(path).st_ino


def lock_down(con: duckdb.DuckDBPyConnection) -> None:
    """Apply LOCKDOWN, or check it is in force when the shared instance was already locked."""
    [(locked, external)] = con.execute(
        "SELECT current_setting('lock_configuration'), current_setting('enable_external_access')").fetchall()
    if not locked:
        for statement in LOCKDOWN:
            con.execute(statement)
    elif external:
        raise SnapshotError("the snapshot is open elsewhere in this process with external access enabled "
                            "and a locked configuration; refusing to serve queries from it")


def open_snapshot(path: Path, use_index: bool = True) -> Snapshot:
    """Open one snapshot file read-only and lock the connection down; use_index=False answers every
    read from DuckDB alone."""
    import duckdb

    lease = take_lease(path)  # FileNotFoundError when retention removed it: callers retry
    try:
        with _OPEN_LOCK:
            identity = _identity(path)
            con = duckdb.connect(str(path), read_only=True)
            try:
                lock_down(con)
                meta = next(iter(con.execute(
                    f"SELECT snapshot_version, published_at FROM {META_TABLE}").fetchall()), None)
                stores = read_store_rows(con)
            except BaseException:
                con.close()
                raise
    except BaseException:
        lease.release()
        raise
    if meta is None:
        con.close()
        lease.release()
        raise SnapshotError(f"snapshot {path} has an empty {META_TABLE} table")
    info = {s.store: s for s in stores}
    return Snapshot(int(meta[0]), path, identity, frozenset(info), con, meta[1], info, lease, use_index)


class SnapshotReader:
    """Hands out the current snapshot, one cached connection per thread. Thread-safe.

    use_index: answer point gets, top and rank from the snapshot's read index. A long-lived reader
    (the service) wants it; a one-shot process (a CLI read) does not: mapping the index costs it the
    numpy and pyarrow imports, several times what DuckDB takes to answer one read."""

    def __init__(self, settings: Settings, use_index: bool = True) -> None:
        self.settings = settings
        self.use_index = use_index
        self._local = threading.local()
        # Weak: a thread that ends drops its connection (and with it any pruned file it kept alive).
        self._opened: weakref.WeakSet[Snapshot] = weakref.WeakSet()
        self._lock = threading.Lock()
        self._pointer = CurrentPointer(settings)

    def _resolve(self) -> Snapshot:
        import duckdb

        last_error: Exception | None = None
        for _ in range(OPEN_ATTEMPTS):
            path = self._pointer.resolve()
            cached: Snapshot | None = getattr(self._local, "snapshot", None)
            try:
                if cached is not None and cached.identity == _identity(path):
                    return cached
                fresh = open_snapshot(path, self.use_index)
            except (FileNotFoundError, duckdb.IOException) as exc:
                last_error = exc  # retention removed the file between resolving CURRENT and opening it
                continue
            if cached is not None:
                self._forget(cached)
            self._local.snapshot = fresh
            with self._lock:
                self._opened.add(fresh)
            return fresh
        raise SnapshotError(f"could not open the current snapshot after {OPEN_ATTEMPTS} attempts: {last_error}")

    def _forget(self, snapshot: Snapshot) -> None:
        with self._lock:
            self._opened.discard(snapshot)
        snapshot.close()

    @contextmanager
    def snapshot(self) -> Iterator[Snapshot]:
        """The current snapshot, pinned for the duration of the block (use it from this thread only)."""
        yield self._resolve()

    def close(self) -> None:
        """Close every connection this reader opened (call when no read is running)."""
        with self._lock:
            opened, self._opened = list(self._opened), weakref.WeakSet()
        for snapshot in opened:
            snapshot.close()
        self._local = threading.local()

    def __enter__(self) -> SnapshotReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["LOCKDOWN", "Snapshot", "SnapshotReader", "lock_down", "open_snapshot"]
