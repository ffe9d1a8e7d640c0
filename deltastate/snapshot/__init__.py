"""Global DuckDB snapshots of the stores' state: publish (publish.py) and find (catalog.py) them.

publish.py is imported on first use: it needs the store definitions and the changelog layout,
which a process that only reads a published snapshot (a one-shot CLI read) should not pay for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from deltastate.snapshot.catalog import (
    SnapshotInfo,
    StoreSnapshot,
    current_snapshot,
    current_version,
    list_snapshots,
)

if TYPE_CHECKING:
    from deltastate.snapshot.publish import describe, publish_snapshot

_FROM_PUBLISH = ("describe", "publish_snapshot")

__all__ = [
    "SnapshotInfo",
    "StoreSnapshot",
    "current_snapshot",
    "current_version",
    "describe",
    "list_snapshots",
    "publish_snapshot",
]


def __getattr__(name: str) -> Any:
    if name in _FROM_PUBLISH:
        from deltastate.snapshot import publish

        return getattr(publish, name)
    raise AttributeError(f"module 'deltastate.snapshot' has no attribute {name!r}")
