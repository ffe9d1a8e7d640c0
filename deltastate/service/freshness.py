"""How fresh an answer is: the snapshot that served it, when it was published, and its staleness.

Staleness of a store = the newest changelog commit's time minus the commit time of the changelog
version the snapshot holds (0 when the snapshot holds the newest commit), in seconds. For answers
over several stores (SQL, /stores) it is the largest of theirs. The newest commit comes from the
Delta log directly (changelog/deltalog.py), cached briefly, so computing it costs no Spark and almost
no I/O. A fresh read brings the answer up to the newest commit: its staleness is 0.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from deltastate.changelog.deltalog import DeltaLog, local_dir
from deltastate.changelog.layout import CHANGELOG
from deltastate.config import Settings
from deltastate.query.errors import StaleSnapshotError
from deltastate.query.reader import Snapshot


@dataclass(frozen=True)
class Freshness:
    snapshot_version: int
    published_at: datetime | None  # naive UTC
    staleness_seconds: float | None  # None: unknown (changelog not on local storage)
    changelog_version: int | None  # what the snapshot holds (single-store answers)
    newest_changelog_version: int | None
    fresh_to_version: int | None = None  # set when a fresh read merged commits up to this version

    def body(self) -> dict[str, Any]:
        return {
            "snapshot_version": self.snapshot_version,
            "published_at": iso(self.published_at),
            "staleness_seconds": self.staleness_seconds,
            "changelog_version": self.changelog_version,
            "newest_changelog_version": self.newest_changelog_version,
            "fresh_to_version": self.fresh_to_version,
        }

    def headers(self) -> dict[str, str]:
        out = {"X-Deltastate-Snapshot-Version": str(self.snapshot_version),
               "X-Deltastate-Published-At": iso(self.published_at) or "",
               "X-Deltastate-Staleness": "unknown" if self.staleness_seconds is None else f"{self.staleness_seconds:.3f}"}
        if self.changelog_version is not None:
            out["X-Deltastate-Changelog-Version"] = str(self.changelog_version)
        return out


def iso(ts: datetime | None) -> str | None:
    return None if ts is None else ts.isoformat() + "Z"


class FreshnessTracker:
    """Computes Freshness for answers; shares one DeltaLog cache across requests."""

    def __init__(self, settings: Settings, deltalog: DeltaLog,
                 storage_of: Callable[[Snapshot, str], str] | None = None) -> None:
        self.settings = settings
        self.deltalog = deltalog
        # Where the snapshot's version of a store keeps its tables (a migrated store: NAME.vN).
        self.storage_of = storage_of or (lambda _snap, store: store)

    def store_staleness(self, snap: Snapshot, store: str) -> tuple[float | None, int | None, int | None]:
        """(staleness seconds, changelog version held, newest changelog version) of one store."""
        info = snap.store_info.get(store)
        held = None if info is None else info.changelog_version
        path = self.settings.table_path(self.storage_of(snap, store), CHANGELOG)
        newest = self.deltalog.newest_commit(path)
        if newest is None:
            # No changelog yet: nothing is newer than the snapshot; on remote storage we cannot tell.
            return (0.0 if local_dir(path) is not None else None), held, None
        if held is not None and newest.version <= held:
            return 0.0, held, newest.version
        since = (info.changelog_committed_at if info is not None and info.changelog_committed_at is not None
                 else snap.published_at)
        seconds = 0.0 if since is None else max(0.0, (newest.committed_at - since).total_seconds())
        return seconds, held, newest.version

    def of(self, snap: Snapshot, stores: Iterable[str], fresh_to: int | None = None) -> Freshness:
        """Freshness of an answer over `stores` (one store: its versions are reported too)."""
        names = list(stores)
        worst: float | None = 0.0
        held = newest = None
        for name in names:
            seconds, held, newest = self.store_staleness(snap, name)
            if seconds is None or worst is None:
                worst = None
            else:
                worst = max(worst, seconds)
        if fresh_to is not None:
            worst = 0.0
        single = len(names) == 1
        return Freshness(snap.version, snap.published_at, worst, held if single else None,
                         newest if single else None, fresh_to)


def check_max_staleness(freshness: Freshness, max_staleness: float | None, store: str | None) -> None:
    """A typed refusal rather than an answer older than the caller accepts (unknown counts as too old)."""
    if max_staleness is None:
        return
    seconds = freshness.staleness_seconds
    if seconds is None or seconds > max_staleness:
        raise StaleSnapshotError(store, float("inf") if seconds is None else seconds, max_staleness,
                                 freshness.snapshot_version)


__all__ = ["Freshness", "FreshnessTracker", "check_max_staleness", "iso"]
