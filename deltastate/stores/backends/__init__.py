"""Store backends: one per kind of store, and backend_of, which picks a definition's backend.

  base.py       StoreBackend, the facts every backend answers, and their vocabularies
  columns.py    the store-key and entry columns the backends choose from
  keyvalue.py   key-value store (state in Spark's state store, logged to the changelog)
  lru.py        key-value store bounded by max_entries, evicting the least recently updated key
  unlogged.py   key-value store without changelog (state store only; restore replays the topic)
  windowed.py   what window and session stores share (state in the changelog, retention)
  window.py     window store
  session.py    session store
  registry.py   backend_of: the one place that reads a definition's kind; register_backend adds a kind
"""

from deltastate.stores.backends.base import (
    FAMILIES,
    FROM_STATE_STORE,
    KEY_VALUE,
    TTL,
    WINDOWED,
    Read,
    RestoreMode,
    StoreBackend,
)
from deltastate.stores.backends.registry import (
    backend_of,
    backends,
    cleanup_lineage_ids,
    register_backend,
    store_types,
    type_backend,
    unregister_backend,
)

__all__ = ["FAMILIES", "FROM_STATE_STORE", "KEY_VALUE", "TTL", "WINDOWED", "Read", "RestoreMode",
           "StoreBackend", "backend_of", "backends", "cleanup_lineage_ids", "register_backend", "store_types",
           "type_backend", "unregister_backend"]
