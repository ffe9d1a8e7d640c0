"""Reader leases on snapshot files, so retention never deletes a file while someone reads it.

A lease is a shared flock(2) on the snapshot file itself, held from before the DuckDB connection is
opened until after it is closed. The publisher's retention (snapshot/catalog.py `prune`) tries an
exclusive, non-blocking flock on each file it would delete and skips the ones it cannot get; the
next publish retries them. flock works across processes (the service, the CLI, Airflow tasks) and
is released by the kernel when a reader dies, so a crashed reader never pins a file for ever.

flock is independent of the fcntl record locks DuckDB takes on the same file, so neither disturbs
the other.
"""

from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path


class Lease:
    """A held shared lock on one snapshot file; release() is idempotent and thread-safe."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd
        self._lock = threading.Lock()

    def release(self) -> None:
        with self._lock:
            fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing the only descriptor drops the flock

    @property
    def held(self) -> bool:
        return self._fd is not None

    def __del__(self) -> None:  # a forgotten lease must not pin the file past the reader's life
        self.release()


def take_lease(path: Path) -> Lease:
    """Lock path shared. FileNotFoundError when the file is gone (or replaced) before the lock held."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        # Retention may have unlinked the file between open and flock: then we hold a lock on an
        # orphan, which protects nothing. Same inode under the name, or it is gone.
        if os.fstat(fd).st_ino != os.stat(path).st_ino:
            raise FileNotFoundError(f"{path} was replaced while taking a reader lease")
    except BaseException:
        os.close(fd)
        raise
    return Lease(path, fd)


__all__ = ["Lease", "take_lease"]
