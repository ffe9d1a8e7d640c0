"""Which value schema version of a store is current, and the migration in progress, in one small JSON
file per store that is replaced atomically (write a temporary file, rename it over the old one).

Every reader of a store (runs, snapshots, queries, maintenance, DAGs) loads the current version
through stores.load_store, so one rename switches all of them. The file lives beside the store's
tables when the storage root is local, under DELTASTATE_HOME otherwise.

    {"current": 2, "migration": {"from": 1, "to": 2, "phase": "cut-over", ...}, "retired": [1]}
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from deltastate.config import Settings

FILE = "_versions.json"
FIRST_VERSION = 0  # load_store(version=FIRST_VERSION): the first version the store file declares


def control_path(settings: Settings, store: str) -> Path:
    root = settings.storage_root.removeprefix("file://")
    if "://" in root:
        return settings.home / "versions" / f"{store}.json"
    return Path(root) / "stores" / store / FILE


def read_control(settings: Settings, store: str) -> dict[str, Any]:
    """The store's version record; {} when no migration was ever started (its first version is current)."""
    path = control_path(settings, store)
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return {}


def write_control(settings: Settings, store: str, record: dict[str, Any]) -> None:
    path = control_path(settings, store)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(record, indent=1, sort_keys=True))
    os.replace(tmp, path)


# path -> ((mtime_ns, inode), current version): reads ask on every request; a stat is enough until the
# file is replaced (a rename gives a new inode).
_seen: dict[Path, tuple[tuple[int, int], int | None]] = {}


def current_version(settings: Settings, store: str) -> int | None:
    """The current version, None before any migration (the store's first declared version)."""
    path = control_path(settings, store)
    try:
        stat = path.stat()
    except FileNotFoundError:
        return None
    stamp = (stat.st_mtime_ns, stat.st_ino)
    cached = _seen.get(path)
    if cached is not None and cached[0] == stamp:
        return cached[1]
    value = read_control(settings, store).get("current")
    version = None if value is None else int(value)
    _seen[path] = (stamp, version)
    return version
