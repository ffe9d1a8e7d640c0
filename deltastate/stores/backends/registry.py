"""backend_of: the one place that reads a store definition's kind, and the registry of kinds.

`type` names the kind; within the built-in key-value type `changelog.enabled: false` and
`max_entries` pick a variant. The loader refuses combining them (an LRU store's evictions are
changelog deletes), so the order below decides nothing for a loaded definition; the changelog is
asked first because a store without one has neither evictions to log nor history to read.

A new kind of store is one backend module and one `register_backend` call: the store file's `type`
then accepts the backend's store_type, and everything else asks the backend.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from deltastate.stores.backends.base import StoreBackend
from deltastate.stores.backends.keyvalue import KEY_VALUE_BACKEND
from deltastate.stores.backends.lru import LRU_BACKEND
from deltastate.stores.backends.session import SESSION_BACKEND
from deltastate.stores.backends.unlogged import UNLOGGED_BACKEND
from deltastate.stores.backends.window import WINDOW_BACKEND

if TYPE_CHECKING:
    from deltastate.stores.definition import StoreDefinition

BUILT_IN: tuple[StoreBackend, ...] = (KEY_VALUE_BACKEND, LRU_BACKEND, UNLOGGED_BACKEND, WINDOW_BACKEND, SESSION_BACKEND)
_registered: list[StoreBackend] = list(BUILT_IN)
_LOCK = threading.Lock()


def backends() -> tuple[StoreBackend, ...]:
    """Every registered backend: the built-in ones, then those registered, in order."""
    return tuple(_registered)


def store_types() -> tuple[str, ...]:
    """The `type:` values a store file may name."""
    return tuple(dict.fromkeys(b.store_type for b in _registered))


def type_backend(store_type: str) -> StoreBackend | None:
    """The backend a store type names (for the key-value type, the plain key-value backend)."""
    return next((b for b in _registered if b.store_type == store_type), None)


def register_backend(backend: StoreBackend) -> None:
    """Adds a kind of store under a store type of its own; refused when its kind or type is taken."""
    with _LOCK:
        if any(b.kind == backend.kind for b in _registered):
            raise ValueError(f"a backend of kind {backend.kind!r} is registered already")
        if any(b.store_type == backend.store_type for b in _registered):
            raise ValueError(f"store type {backend.store_type!r} is served already")
        _registered.append(backend)


def unregister_backend(kind: str) -> None:
    """Removes a registered kind (not a built-in one)."""
    with _LOCK:
        if any(b.kind == kind for b in BUILT_IN):
            raise ValueError(f"{kind!r} is a built-in kind of store")
        _registered[:] = [b for b in _registered if b.kind != kind]


def backend_of(store: StoreDefinition) -> StoreBackend:
    """The backend of the store's kind; ValueError for a type no backend serves."""
    if store.type == KEY_VALUE_BACKEND.store_type:
        if not store.changelog.enabled:
            return UNLOGGED_BACKEND
        if store.max_entries is not None:
            return LRU_BACKEND
        return KEY_VALUE_BACKEND
    found = type_backend(store.type)
    if found is None:
        raise ValueError(f"store {store.name!r}: no backend serves store type {store.type!r}")
    return found


def cleanup_lineage_ids() -> tuple[str, ...]:
    """The lineage_ids of every tombstone cleanup appends to a changelog, sorted."""
    return tuple(sorted({b.cleanup_lineage_id for b in _registered if b.cleanup_lineage_id is not None}))
