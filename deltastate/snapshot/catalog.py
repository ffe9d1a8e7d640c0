"""Where snapshots live and which one is current.

Layout under settings.snapshots_dir:
    snapshot-000001.duckdb ...   immutable, complete DuckDB files (built under a temp name, renamed)
    CURRENT                      the file name of the snapshot readers should open
    .publish.lock                held by a publisher for its whole run (one publisher at a time)

Readers resolve CURRENT, then open the file it names. CURRENT changes only by os.replace() of a
fully written temp file, after the snapshot it names was renamed into place, so a reader never
meets a half-built snapshot. Older snapshots stay for settings.snapshot_keep versions, so a reader
that resolved CURRENT just before a publish still finds its file.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from deltastate.config import Settings
from deltastate.errors import SnapshotError

if TYPE_CHECKING:
    import duckdb

CURRENT = "CURRENT"
LOCK_FILE = ".publish.lock"
META_TABLE = "_snapshot"
STORES_TABLE = "_snapshot_stores"
TEMP_MARK = ".tmp-"
INDEX_SUFFIX = ".index"  # <snapshot file name>.index/: the version's read index (snapshot/read_index.py)
_NAME = re.compile(r"^snapshot-(\d{6,})\.duckdb$")

META_DDL = f"CREATE TABLE {META_TABLE} (snapshot_version BIGINT NOT NULL, published_at TIMESTAMP NOT NULL)"
STORES_DDL = (
    f"CREATE TABLE {STORES_TABLE} (store VARCHAR PRIMARY KEY, store_type VARCHAR NOT NULL, "
    "changelog_version BIGINT, changelog_committed_at TIMESTAMP, row_count BIGINT NOT NULL, "
    "intake_version BIGINT, stream_times VARCHAR, value_version INTEGER)"
)
# In StoreSnapshot's field order. Snapshots published before the last three existed read them as NULL.
STORE_COLUMNS = ("store", "store_type", "changelog_version", "changelog_committed_at", "row_count",
                 "intake_version", "stream_times", "value_version")
NO_SNAPSHOT = "no snapshot published yet; run `deltastate snapshot publish`"


@dataclass(frozen=True)
class StoreSnapshot:
    """One store's table in a snapshot. Times are naive UTC."""

    store: str
    store_type: str
    changelog_version: int | None  # None: the changelog table did not exist, the table is empty
    changelog_committed_at: datetime | None
    row_count: int
    # Window and session stores: the intake audit version whose stream times set the snapshot's
    # retention horizon, and those times ({"partition": ms}, JSON). Fresh reads advance them.
    intake_version: int | None = None
    stream_times: str | None = None
    # The store's value schema version the table holds (None: the store's first version).
    value_version: int | None = None

    def stream_times_by_partition(self) -> dict[int, int]:
        return {int(p): int(ms) for p, ms in json.loads(self.stream_times or "{}").items()}


@dataclass(frozen=True)
class SnapshotInfo:
    version: int
    path: Path
    published_at: datetime  # naive UTC
    stores: tuple[StoreSnapshot, ...]
    current: bool = False

    def store(self, name: str) -> StoreSnapshot | None:
        return next((s for s in self.stores if s.store == name), None)


def read_store_rows(con: duckdb.DuckDBPyConnection) -> list[StoreSnapshot]:
    """The _snapshot_stores rows of an open snapshot, older snapshots' missing columns as None."""
    present = {c for (c,) in con.execute(
        "SELECT column_name FROM duckdb_columns() WHERE database_name = current_database() "
        "AND schema_name = 'main' AND table_name = ?", [STORES_TABLE]).fetchall()}
    cols = ", ".join(c if c in present else f"NULL AS {c}" for c in STORE_COLUMNS)
    return [StoreSnapshot(*row) for row in con.execute(f"SELECT {cols} FROM {STORES_TABLE} ORDER BY store").fetchall()]


def insert_store_row(con: duckdb.DuckDBPyConnection, store: StoreSnapshot) -> None:
    con.execute(f"INSERT INTO {STORES_TABLE} ({', '.join(STORE_COLUMNS)}) "
                f"VALUES ({', '.join('?' for _ in STORE_COLUMNS)})",
                [getattr(store, c) for c in STORE_COLUMNS])


def snapshot_name(version: int) -> str:
    return f"snapshot-{version:06d}.duckdb"


def version_of(name: str) -> int | None:
    """The version in a snapshot file name, None for anything else (temp files, CURRENT, WALs)."""
    match = _NAME.match(name)
    return int(match.group(1)) if match else None


def snapshot_files(settings: Settings) -> dict[int, Path]:
    """Published snapshot files by version, ascending."""
    folder = settings.snapshots_dir
    if not folder.is_dir():
        return {}
    found = {v: p for p in folder.iterdir() if (v := version_of(p.name)) is not None}
    return dict(sorted(found.items()))


def read_pointer(settings: Settings) -> str | None:
    """The file name CURRENT holds, None when nothing was published yet."""
    try:
        name = (settings.snapshots_dir / CURRENT).read_text().strip()
    except FileNotFoundError:
        return None
    if version_of(name) is None:
        raise SnapshotError(f"{settings.snapshots_dir / CURRENT} holds {name!r}, not a snapshot file name")
    return name


def write_pointer(settings: Settings, name: str) -> None:
    """Point CURRENT at name atomically: write a temp file, fsync it, os.replace() it over CURRENT."""
    folder = settings.snapshots_dir
    tmp = folder / f"{CURRENT}{TEMP_MARK}{os.getpid()}"
    with open(tmp, "w") as fh:
        fh.write(name + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, folder / CURRENT)
    fsync_dir(folder)


def fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def current_snapshot(settings: Settings) -> Path:
    """Path of the current snapshot file; SnapshotError when none was published."""
    name = read_pointer(settings)
    if name is None:
        raise SnapshotError(NO_SNAPSHOT)
    path = settings.snapshots_dir / name
    if not path.is_file():
        raise SnapshotError(f"{settings.snapshots_dir / CURRENT} names {name}, which is missing; "
                            "run `deltastate snapshot publish`")
    return path


class CurrentPointer:
    """The file CURRENT names, read again only when CURRENT changes: a publish replaces it (a new
    inode), so while its stat is unchanged the file it names is too, and a read costs one stat."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._seen: tuple[tuple[int, int, int], Path] | None = None

    def resolve(self) -> Path:
        try:
            stat = os.stat(self.settings.snapshots_dir / CURRENT)
        except FileNotFoundError:
            return current_snapshot(self.settings)  # raises the no-snapshot error
        key = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
        seen = self._seen
        if seen is not None and seen[0] == key:
            return seen[1]
        path = current_snapshot(self.settings)
        self._seen = (key, path)
        return path


def current_version(settings: Settings) -> int | None:
    name = read_pointer(settings)
    return None if name is None else version_of(name)


def read_info(path: Path, current: bool = False) -> SnapshotInfo:
    """The metadata tables of one snapshot file."""
    import duckdb

    try:
        con = duckdb.connect(str(path), read_only=True)
    except duckdb.Error as exc:
        raise SnapshotError(f"cannot open snapshot {path}: {exc}") from exc
    try:
        meta = next(iter(con.execute(f"SELECT snapshot_version, published_at FROM {META_TABLE}").fetchall()), None)
        stores = read_store_rows(con)
    except duckdb.Error as exc:
        raise SnapshotError(f"snapshot {path} has no readable metadata: {exc}") from exc
    finally:
        con.close()
    if meta is None:
        raise SnapshotError(f"snapshot {path} has an empty {META_TABLE} table")
    return SnapshotInfo(version=int(meta[0]), path=path, published_at=meta[1],
                        stores=tuple(stores), current=current)


def list_snapshots(settings: Settings) -> list[SnapshotInfo]:
    """Every published snapshot still on disk, oldest first; the current one has current=True.

    A file deleted by retention while it is being listed is skipped."""
    pointer = read_pointer(settings)
    infos = []
    for path in snapshot_files(settings).values():
        try:
            infos.append(read_info(path, current=path.name == pointer))
        except SnapshotError:
            if path.exists():
                raise
    return infos


def prune(settings: Settings, keep: int) -> list[Path]:
    """Delete all but the newest `keep` (at least 1) snapshots, never the current one, plus leftovers
    of crashed publishes. Call only while holding the publish lock. Returns what was deleted."""
    folder = settings.snapshots_dir
    pointer = read_pointer(settings)
    versions = list(snapshot_files(settings).items())
    doomed = [p for _, p in versions[: max(0, len(versions) - max(1, keep))] if p.name != pointer]
    doomed += [p for p in folder.iterdir() if TEMP_MARK in p.name and p.is_file()]
    removed = [path for path in doomed if _unlink_unless_read(path)]
    # Read indexes go with their file; a crashed publish's index folders go too.
    for path in folder.iterdir():
        if path.is_dir() and path.name.endswith(INDEX_SUFFIX) and (
                TEMP_MARK in path.name or not (folder / path.name.removesuffix(INDEX_SUFFIX)).exists()):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def _unlink_unless_read(path: Path) -> bool:
    """Delete path (and its WAL) unless a reader holds a lease on it (a shared flock, taken by
    deltastate/query/leases.py); unlinking under our exclusive flock means a reader that locks the
    file next finds its name gone and reopens CURRENT. Skipped files go at a later publish."""
    import fcntl

    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return False
    try:
        for victim in (path, path.with_name(path.name + ".wal")):
            victim.unlink(missing_ok=True)
    finally:
        os.close(fd)
    return True


__all__ = [
    "CURRENT", "META_TABLE", "NO_SNAPSHOT", "STORES_TABLE", "SnapshotInfo", "StoreSnapshot", "current_snapshot",
    "current_version", "insert_store_row", "list_snapshots", "prune", "read_info", "read_pointer", "read_store_rows",
    "snapshot_files", "snapshot_name", "version_of", "write_pointer",
]
