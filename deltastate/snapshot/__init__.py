"""Global DuckDB snapshots of the stores' state: publish (publish.py) and find (catalog.py) them."""

from deltastate.snapshot.catalog import (
    SnapshotInfo,
    StoreSnapshot,
    current_snapshot,
    current_version,
    list_snapshots,
)
from deltastate.snapshot.publish import describe, publish_snapshot

__all__ = [
    "SnapshotInfo",
    "StoreSnapshot",
    "current_snapshot",
    "current_version",
    "describe",
    "list_snapshots",
    "publish_snapshot",
]
