"""Which value schema version of a store is current, and the migration in progress, in one small JSON
file per store that is replaced atomically (write a temporary file, rename it over the old one).

Every reader of a store (runs, snapshots, queries, maintenance, DAGs) loads the current version
through stores.load_store, so one rename switches all of them. The file lives beside the store's
tables when the storage root is local, under DELTASTATE_HOME otherwise.

    {"current": 2, "migration": {"from": 1, "to": 2, "phase": "cut-over", ...}, "rates": {...}, "retired": [1]}

The record is a frozen VersionRecord (with a frozen Migration); read_record and write_record are its
one reader and writer; the migration steps change it with dataclasses.replace.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from deltastate.config import Settings
from deltastate.errors import StoreDefinitionError

FILE = "_versions.json"
FIRST_VERSION = 0  # load_store(version=FIRST_VERSION): the first version the store file declares


def control_path(settings: Settings, store: str) -> Path:
    root = settings.storage_root.removeprefix("file://")
    if "://" in root:
        return settings.home / "versions" / f"{store}.json"
    return Path(root) / "stores" / store / FILE


@dataclass(frozen=True)
class BuildRate:
    """What a migration build of one kind (seed or replay) measured: records over seconds."""

    records: int
    seconds: float


@dataclass(frozen=True)
class Migration:
    """The migration in progress, or the last one. Phases: stores/fence.py."""

    from_version: int
    to_version: int
    phase: str
    started_at: str | None = None  # ISO times of the steps
    cutover_at: str | None = None
    rolled_back_at: str | None = None
    retired_at: str | None = None
    plan: Mapping[str, Any] | None = None  # the plan start made and follows (MigrationPlan.to_dict)
    seeded_rows: int | None = None
    seed_offsets: Mapping[int, int] | None = None  # partition -> the next offset the seed stands at
    checks: Mapping[str, Any] | None = None  # the cutover checks' report

    @property
    def build(self) -> str | None:
        return None if self.plan is None else self.plan.get("build")


@dataclass(frozen=True)
class VersionRecord:
    """The store's version record; the empty record before any migration (its first version is current)."""

    current: int | None = None
    migration: Migration | None = None
    rates: Mapping[str, BuildRate] = field(default_factory=dict)  # build kind -> its last measured rate
    retired: tuple[int, ...] = ()


# The keys in the file where they differ from the attribute names ("from" is a Python keyword).
_MIGRATION_KEYS = {"from_version": "from", "to_version": "to"}


def _migration_of(data: Mapping[str, Any]) -> Migration:
    offsets = data.get("seed_offsets")
    return Migration(int(data["from"]), int(data["to"]), str(data["phase"]), data.get("started_at"),
                     data.get("cutover_at"), data.get("rolled_back_at"), data.get("retired_at"), data.get("plan"),
                     data.get("seeded_rows"), None if offsets is None else {int(p): int(o) for p, o in offsets.items()},
                     data.get("checks"))


def _migration_data(migration: Migration) -> dict[str, Any]:
    out = {}
    for f in fields(migration):
        value = getattr(migration, f.name)
        if value is None:
            continue
        if f.name == "seed_offsets":
            value = {str(p): o for p, o in value.items()}
        out[_MIGRATION_KEYS.get(f.name, f.name)] = value
    return out


def record_of(data: Mapping[str, Any]) -> VersionRecord:
    """A record from the file's JSON."""
    current, migration = data.get("current"), data.get("migration")
    return VersionRecord(None if current is None else int(current),
                         None if not migration else _migration_of(migration),
                         {build: BuildRate(int(r["records"]), float(r["seconds"]))
                          for build, r in (data.get("rates") or {}).items()},
                         tuple(int(v) for v in data.get("retired", ())))


def record_data(record: VersionRecord) -> dict[str, Any]:
    """The record as the file's JSON; keys without a value are left out."""
    out: dict[str, Any] = {}
    if record.current is not None:
        out["current"] = record.current
    if record.migration is not None:
        out["migration"] = _migration_data(record.migration)
    if record.rates:
        out["rates"] = {build: {"records": r.records, "seconds": r.seconds} for build, r in record.rates.items()}
    if record.retired:
        out["retired"] = sorted(record.retired)
    return out


def read_record(settings: Settings, store: str) -> VersionRecord:
    """The store's version record; the empty record when no migration was ever started."""
    path = control_path(settings, store)
    try:
        text = path.read_text()
    except FileNotFoundError:
        return VersionRecord()
    try:
        return record_of(json.loads(text))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:  # a hand edit or a foreign file
        raise StoreDefinitionError(store, f"its version record {path} is unreadable ({type(exc).__name__}: "
                                          f"{exc}); restore the file from a backup or move it aside") from exc


def write_record(settings: Settings, store: str, record: VersionRecord) -> None:
    path = control_path(settings, store)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(record_data(record), indent=1, sort_keys=True))
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
    version = read_record(settings, store).current
    _seen[path] = (stamp, version)
    return version
