"""What the plugin's store page shows: per declared store, the current snapshot's version and row
count, how old it is, and how far the Delta changelog has moved past it. No Spark: the changelog's
newest version is read from the file names in its _delta_log (local storage only)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from deltastate.changelog.deltalog import newest_version
from deltastate.config import Settings
from deltastate.errors import SnapshotError
from deltastate.snapshot.catalog import current_snapshot, read_info
from deltastate.stores import list_stores, load_store


@dataclass(frozen=True)
class StoreStatus:
    store: str
    store_type: str
    topic: str
    snapshot_version: int | None
    published_at: str | None
    staleness_s: float | None  # now - the snapshot's publish time
    snapshot_changelog_version: int | None
    changelog_version: int | None  # newest commit of the changelog, None when unknown or absent
    versions_behind: int | None
    rows: int | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def store_statuses(settings: Settings, now: datetime | None = None) -> list[StoreStatus]:
    now = now or datetime.now(UTC)
    try:
        info = read_info(current_snapshot(settings), current=True)
    except SnapshotError:
        info = None
    out = []
    for name in list_stores(settings):
        store = load_store(settings, name)
        snap = info.store(name) if info else None
        published = None if info is None else info.published_at.replace(tzinfo=UTC)
        latest = newest_version(settings.table_path(store.storage, "changelog"))
        pinned = None if snap is None else snap.changelog_version
        behind = None if latest is None else latest - (-1 if pinned is None else pinned)
        out.append(StoreStatus(
            store=name, store_type=store.type, topic=store.source.topic,
            snapshot_version=None if info is None else info.version,
            published_at=None if published is None else published.isoformat(),
            staleness_s=None if published is None else round((now - published).total_seconds(), 1),
            snapshot_changelog_version=pinned, changelog_version=latest,
            versions_behind=behind if snap is not None or latest is not None else None,
            rows=None if snap is None else snap.row_count))
    return out
