"""backend_of: the one place that reads a store definition's kind.

`type` names the family member; within key-value stores `changelog.enabled: false` and
`max_entries` pick a variant. The loader refuses combining them (an LRU store's evictions are
changelog deletes), so the order below decides nothing for a loaded definition; the changelog is
asked first because a store without one has neither evictions to log nor history to read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from deltastate.stores.backends.base import StoreBackend
from deltastate.stores.backends.keyvalue import KEY_VALUE_BACKEND
from deltastate.stores.backends.lru import LRU_BACKEND
from deltastate.stores.backends.session import SESSION_BACKEND
from deltastate.stores.backends.unlogged import UNLOGGED_BACKEND
from deltastate.stores.backends.window import WINDOW_BACKEND

if TYPE_CHECKING:
    from deltastate.stores.definition import StoreDefinition

BACKENDS: tuple[StoreBackend, ...] = (KEY_VALUE_BACKEND, LRU_BACKEND, UNLOGGED_BACKEND, WINDOW_BACKEND, SESSION_BACKEND)
_WINDOWED = {SESSION_BACKEND.store_type: SESSION_BACKEND, WINDOW_BACKEND.store_type: WINDOW_BACKEND}


def backend_of(store: StoreDefinition) -> StoreBackend:
    """The backend of the store's kind; ValueError for a type no backend serves."""
    windowed = _WINDOWED.get(store.type)
    if windowed is not None:
        return windowed
    if store.type != KEY_VALUE_BACKEND.store_type:
        raise ValueError(f"store {store.name!r}: no backend serves store type {store.type!r}")
    if not store.changelog.enabled:
        return UNLOGGED_BACKEND
    if store.max_entries is not None:
        return LRU_BACKEND
    return KEY_VALUE_BACKEND


def cleanup_lineage_ids() -> tuple[str, ...]:
    """The lineage_ids of every tombstone cleanup appends to a changelog, sorted."""
    return tuple(sorted(b.cleanup_lineage_id for b in BACKENDS if b.cleanup_lineage_id is not None))
