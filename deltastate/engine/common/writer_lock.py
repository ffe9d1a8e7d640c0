"""One writer per checkpoint: an flock held by the process that runs the store's Spark queries.

Why flock and why in the Spark process: Airflow's max_active_runs=1 stops two DAG runs from
overlapping, but not a retried task whose previous worker was killed while its spark-submit child
(the driver) lives on as an orphan. The driver itself takes the lock, so the lock lives exactly as
long as the old writer does: the kernel drops it when that process dies, however it dies, and a
second driver for the same checkpoint waits, then fails with a message naming the holder.

The lock is claimed once per process and kept for the process's life (re-claiming is a no-op):
two flocks on one file from the same process would conflict with each other, and a driver process
is the writer for its whole life anyway. Checkpoints on a non-local storage root (s3://, abfss://)
are locked under DELTASTATE_HOME instead, which protects against writers on the same machine only.
"""

from __future__ import annotations

import fcntl
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from deltastate.config import Settings
from deltastate.errors import DeltastateError

LOCK_WAIT_ENV = "DELTASTATE_WRITER_LOCK_WAIT"
DEFAULT_WAIT_S = 30.0
_held: dict[str, IO[str]] = {}  # lock path -> open file holding the flock, for this process's life


class WriterBusyError(DeltastateError):
    def __init__(self, store: str, path: Path, holder: str, waited: float) -> None:
        super().__init__(
            f"store {store!r}: checkpoint writer lock {path} is held by {holder} (waited {waited:.0f}s); "
            "a previous run of this store is still writing, so this run must not start a second writer")
        self.store = store
        self.path = path
        self.holder = holder


@dataclass(frozen=True)
class WriterLock:
    store: str
    path: Path
    pid: int


def lock_path(settings: Settings, store_name: str) -> Path:
    """Where a store's writer lock lives: next to its checkpoint folder when that is local."""
    checkpoint = settings.checkpoint_path(store_name).removeprefix("file://")
    if "://" in checkpoint:
        return settings.home / "locks" / f"{store_name}.writer.lock"
    return Path(checkpoint + ".writer.lock")


def _wait_s() -> float:
    try:
        return float(os.environ.get(LOCK_WAIT_ENV, DEFAULT_WAIT_S))
    except ValueError:
        return DEFAULT_WAIT_S


def read_holder(path: Path) -> str:
    try:
        text = path.read_text().strip()
    except OSError:
        text = ""
    return text or "another process"


def claim_checkpoint(settings: Settings, store_name: str, wait_s: float | None = None) -> WriterLock:
    """Become the only writer of the store's checkpoint for the rest of this process's life.

    Waits up to wait_s (default $DELTASTATE_WRITER_LOCK_WAIT or 30 s) for a previous writer to end,
    then raises WriterBusyError naming the holder's pid and host."""
    path = lock_path(settings, store_name)
    key = str(path)
    if key in _held:
        return WriterLock(store_name, path, os.getpid())
    path.parent.mkdir(parents=True, exist_ok=True)
    fh = open(path, "a+")
    limit = _wait_s() if wait_s is None else wait_s
    started = time.monotonic()
    while True:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            waited = time.monotonic() - started
            if waited >= limit:
                fh.close()
                raise WriterBusyError(store_name, path, read_holder(path), waited) from None
            time.sleep(min(0.5, max(0.05, limit - waited)))
    # Record who holds it, for the message a blocked writer prints (the flock is the truth).
    fh.seek(0)
    fh.truncate()
    fh.write(f"pid {os.getpid()} on {os.uname().nodename}\n")
    fh.flush()
    _held[key] = fh
    return WriterLock(store_name, path, os.getpid())


def release_checkpoint(settings: Settings, store_name: str) -> bool:
    """Give the lock up early (tests, long-lived processes that stop writing); True if it was held."""
    fh = _held.pop(str(lock_path(settings, store_name)), None)
    if fh is None:
        return False
    fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
    fh.close()
    return True


def release_all() -> list[str]:
    """Give up every lock this process holds: a resident driver's command ends as its own process
    would, so the next writer (in the driver or elsewhere) finds the checkpoint free. The paths released."""
    released = []
    while _held:
        key, fh = _held.popitem()
        fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
        fh.close()
        released.append(key)
    return released
