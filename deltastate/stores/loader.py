"""Finds a store's definition: schemas/stores/NAME.yaml at the store's current value schema version,
checked by parse.py, and kept in a cache of checked definitions under DELTASTATE_HOME.

Checking a definition needs pydantic and PyYAML (~0.3 s to import); a one-shot read (`deltastate get`)
needs only the checked result. The cache holds that result, pickled, with a digest of the contents of
every file it could depend on: the store file, every event and value schema, and the modules of this
package that build definitions (a few dozen small files: well under a millisecond to read). Any of
them changing (or a file appearing or going) misses the cache, and the definition is checked again
from the files. Contents, not modification times: a file rewritten within the filesystem's
timestamp tick keeps its time. A definition that fails its checks is
never cached, so its error is reported on every load.

The cache lives in the user's own DELTASTATE_HOME, written through a temporary file and a rename;
an entry that cannot be read (from another deltastate version, cut short) counts as a miss.
"""

from __future__ import annotations

import hashlib
import os
import pickle
from pathlib import Path

from deltastate.config import Settings
from deltastate.errors import UnknownStoreError
from deltastate.stores.current import current_version
from deltastate.stores.definition import StoreDefinition

CACHE_FORMAT = 1
_CODE_DIR = Path(__file__).resolve().parent


def list_stores(settings: Settings) -> list[str]:
    return sorted(p.stem for p in (settings.schemas_dir / "stores").glob("*.yaml"))


def load_store(settings: Settings, name: str, version: int | None = None) -> StoreDefinition:
    """The store's definition at value schema `version`; default: the current version (the first
    declared one until a migration cuts over, stores/current.py)."""
    path = settings.schemas_dir / "stores" / f"{name}.yaml"
    if not path.is_file():
        raise UnknownStoreError(name, list_stores(settings))
    version = version if version is not None else current_version(settings, name)
    entry = _cache_file(settings, name, version)
    stamp = _stamp(settings.schemas_dir, path)
    cached = _read_cache(entry, stamp)
    if cached is not None:
        return cached
    from deltastate.stores.parse import parse_store

    definition = parse_store(settings.schemas_dir, name, path, version)
    _write_cache(entry, stamp, definition)
    return definition


def _cache_file(settings: Settings, name: str, version: int | None) -> Path:
    # One folder per schemas directory, so two projects sharing a home never read each other's entries.
    where = hashlib.sha1(str(settings.schemas_dir.resolve()).encode()).hexdigest()[:12]
    return settings.home / "cache" / "stores" / where / f"{name}.{'first' if version is None else version}.pickle"


def _stamp(schemas_dir: Path, store_file: Path) -> str:
    """A digest of the names and contents of every file a definition can depend on."""
    files = [store_file]
    for folder in (schemas_dir / "events", schemas_dir / "values"):
        files.extend(sorted(folder.glob("*.json")))
    files.extend(sorted(_CODE_DIR.glob("*.py")))
    digest = hashlib.sha256()
    for file in files:
        try:
            content = file.read_bytes()
        except FileNotFoundError:  # went between the listing and the read: the digest differs anyway
            continue
        digest.update(f"{file}\0{len(content)}\0".encode())
        digest.update(content)
    return digest.hexdigest()


def _read_cache(entry: Path, stamp: str) -> StoreDefinition | None:
    try:
        with entry.open("rb") as f:
            fmt, stored_stamp, definition = pickle.load(f)
    except FileNotFoundError:
        return None
    except Exception:  # noqa: BLE001 - an unreadable entry is a miss; the files are checked again
        return None
    if fmt != CACHE_FORMAT or stored_stamp != stamp or not isinstance(definition, StoreDefinition):
        return None
    return definition


def _write_cache(entry: Path, stamp: str, definition: StoreDefinition) -> None:
    """Best effort: a home that cannot be written to only means the next load checks the files again."""
    temp = entry.with_name(f"{entry.name}.tmp-{os.getpid()}")
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        with temp.open("wb") as f:
            pickle.dump((CACHE_FORMAT, stamp, definition), f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(temp, entry)
    except OSError:
        temp.unlink(missing_ok=True)
