"""Snapshot swaps inside the service: one open connection per snapshot file, reference-counted.

Every request leases a snapshot for its whole duration and reads through its own cursor, so:
  * a new snapshot is picked up by the next request after CURRENT moves (no restart);
  * a request that started on the old snapshot finishes on it (no failed in-flight request, and an
    answer never mixes two versions);
  * the old snapshot's connection closes when its last request releases it, and only then does its
    file lease (query/leases.py) go, so the publisher's retention deletes it only after that.
While a publish or a restore runs, CURRENT still names the last good snapshot, so reads go on from
it (the standby-replica behaviour of KIP-535); staleness says by how much it trails.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

from deltastate.config import Settings
from deltastate.errors import SnapshotError
from deltastate.query.errors import SnapshotNotRetainedError
from deltastate.query.reader import OPEN_ATTEMPTS, Snapshot, open_snapshot
from deltastate.snapshot.catalog import CurrentPointer, read_info, snapshot_files


class _Handle:
    """One open snapshot and how many holders it has (the pool itself counts while it is current)."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self.refs = 1
        self.cursor_lock = threading.Lock()


class _LazyCursor:
    """A request's DuckDB cursor, opened on first use: reads answered by the read index never need one."""

    def __init__(self, handle: _Handle) -> None:
        self._handle = handle
        self._cursor = None

    def __getattr__(self, name: str):
        if self._cursor is None:
            with self._handle.cursor_lock:
                self._cursor = self._handle.snapshot.con.cursor()
        return getattr(self._cursor, name)

    def release(self) -> None:
        if self._cursor is not None:
            self._cursor.close()


class SnapshotPool:
    """Leases snapshots to requests. Thread-safe."""

    def __init__(self, settings: Settings, on_swap: Callable[[int, int | None], None] | None = None) -> None:
        self.settings = settings
        self._on_swap = on_swap
        self._lock = threading.Lock()
        self._current: _Handle | None = None
        self._published: dict[str, datetime] = {}  # file name -> published_at (files are immutable)
        self._pointer = CurrentPointer(settings)
        self.swaps = 0

    # -- reference counting ------------------------------------------------------------------------
    def _release(self, handle: _Handle) -> None:
        with self._lock:
            handle.refs -= 1
            last = handle.refs == 0
        if last:
            handle.snapshot.close()

    def _current_handle(self) -> _Handle:
        """The handle of the snapshot CURRENT names, with one more reference taken for the caller."""
        last_error: Exception | None = None
        for _ in range(OPEN_ATTEMPTS):
            path = self._pointer.resolve()  # SnapshotError when nothing is published
            with self._lock:
                held = self._current
                if held is not None and held.snapshot.path.name == path.name:
                    held.refs += 1
                    return held
            try:
                fresh = _Handle(open_snapshot(path))
            except FileNotFoundError as exc:  # pruned between reading CURRENT and opening it
                last_error = exc
                continue
            with self._lock:
                held = self._current
                if held is not None and held.snapshot.version >= fresh.snapshot.version:
                    held.refs += 1  # another request swapped first (to this or a newer file)
                    keep, drop = held, fresh
                else:
                    self._current, keep, drop = fresh, fresh, held
                    fresh.refs += 1  # the pool's own reference plus the caller's
                    self.swaps += 1
            if drop is fresh:
                fresh.snapshot.close()
            else:
                if drop is not None:
                    self._release(drop)  # the pool's reference to the previous snapshot
                if self._on_swap is not None:
                    self._on_swap(fresh.snapshot.version, None if drop is None else drop.snapshot.version)
            return keep
        raise SnapshotError(f"could not open the current snapshot after {OPEN_ATTEMPTS} attempts: {last_error}")

    def _retained_handle(self, version: int) -> _Handle:
        files = snapshot_files(self.settings)
        path = files.get(version)
        if path is None:
            raise SnapshotNotRetainedError(
                f"snapshot version {version} is not retained; retained versions: "
                f"{', '.join(map(str, files)) or 'none'} (parameter 'as_of_version')")
        with self._lock:
            held = self._current
            if held is not None and held.snapshot.version == version:
                held.refs += 1
                return held
        try:
            return _Handle(open_snapshot(path))  # refs = 1: the caller's; closed at its release
        except FileNotFoundError as exc:
            raise SnapshotNotRetainedError(f"snapshot version {version} was just removed by retention "
                                           "(parameter 'as_of_version')") from exc

    def version_as_of(self, when: datetime) -> int:
        """The newest retained snapshot published at or before `when` (naive UTC, millisecond
        resolution like every time a read accepts: a publish within that millisecond counts)."""
        chosen = None
        for version, path in snapshot_files(self.settings).items():
            published = self._published_at(path)
            if published is not None and published.replace(microsecond=published.microsecond // 1000 * 1000) <= when:
                chosen = version
        if chosen is None:
            raise SnapshotNotRetainedError(f"no retained snapshot was published at or before {when.isoformat()}Z "
                                           "(parameter 'as_of')")
        return chosen

    def _published_at(self, path: Path) -> datetime | None:
        found = self._published.get(path.name)
        if found is None:
            try:
                found = read_info(path).published_at
            except SnapshotError:
                return None  # removed by retention meanwhile
            self._published[path.name] = found
        return found

    # -- leases ----------------------------------------------------------------------------------
    @contextmanager
    def lease(self, version: int | None = None) -> Iterator[Snapshot]:
        """The current snapshot (or a retained version), with a private cursor, for one request."""
        handle = self._current_handle() if version is None else self._retained_handle(version)
        try:
            cursor = _LazyCursor(handle)
            try:
                yield dataclasses.replace(handle.snapshot, con=cursor, lease=None)
            finally:
                cursor.release()
        finally:
            self._release(handle)

    def current_version(self) -> int | None:
        with self._lock:
            return None if self._current is None else self._current.snapshot.version

    def current_published_at(self) -> datetime | None:
        with self._lock:
            return None if self._current is None else self._current.snapshot.published_at

    def close(self) -> None:
        """Drop the pool's reference; the connection closes when the last request is done."""
        with self._lock:
            held, self._current = self._current, None
        if held is not None:
            self._release(held)


__all__ = ["SnapshotPool"]
