"""What a read reads from: the store's definition, and the rows of a snapshot it may see.

ReadSource is the state every read shares and the choices every read makes before it runs: which
definition describes the store (the value schema version the pinned snapshot holds, else the
current one, parsed once and cached across requests), and which rows answer. Those rows are the
snapshot's table of the store, with any changelog rows newer than the snapshot merged in (fresh
reads: a put replaces the snapshot's row of the same store key, a tombstone removes it, and for
window and session stores entries past retention at the newer stream times drop out), narrowed to
the source partitions of the scope (an instance of a query tier answers its share of a scattered
read that way). Where no overlay applies, the snapshot's read index may answer instead of DuckDB.
The reads themselves are in indexed.py and scans.py; reads.py puts them together as Queries.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

from deltastate.changelog.layout import KEY, OP, OP_PUT, SOURCE_PARTITION, store_key_columns
from deltastate.changelog.rules import retained_column
from deltastate.config import Settings
from deltastate.errors import SnapshotError, UnknownStoreError
from deltastate.query.errors import ParameterError, StoreTypeError
from deltastate.query.reader import Snapshot, SnapshotReader
from deltastate.snapshot.publish import quote
from deltastate.snapshot.read_index import StoreIndex
from deltastate.stores import list_stores, load_store
from deltastate.stores.backends import Read, backend_of
from deltastate.stores.current import FIRST_VERSION, current_version
from deltastate.stores.definition import StoreDefinition

if TYPE_CHECKING:
    import pyarrow as pa

    from deltastate.query.fresh import Overlay

_STORE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
FRESH_OP = OP  # the overlay's column telling puts from tombstones


def positive(name: str, value: int | None, optional: bool = True) -> int | None:
    """A count parameter (n, limit) checked: a positive integer, or None when optional."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ParameterError(name, f"must be a positive integer, got {value!r}")
    return value


def _in_snapshot(snap: Snapshot, store: StoreDefinition) -> None:
    """SnapshotError unless the snapshot holds the store."""
    if store.name not in snap.stores:
        raise SnapshotError(f"store {store.name!r} is not in snapshot {snap.version}; "
                            "run `deltastate snapshot publish` to include it")


def _of_keys(rows: pa.Table, keys: Sequence[str]) -> pa.Table:
    """The overlay rows whose "key" is one of keys."""
    import pyarrow as pa
    import pyarrow.compute as pc

    column = rows.column(KEY)
    return rows.filter(pc.is_in(column, value_set=pa.array(list(dict.fromkeys(keys)), type=column.type)))


class ReadSource:
    """The settings, reader, definition cache, overlays and partition scope of a set of reads."""

    def __init__(self, settings: Settings, reader: SnapshotReader | None = None,
                 definitions: dict[tuple[str, int | None], StoreDefinition] | None = None,
                 overlays: dict[str, Overlay] | None = None, partitions: frozenset[int] | None = None) -> None:
        self.settings = settings
        self.reader = reader or SnapshotReader(settings)
        # Parsing a store's YAML costs milliseconds; a service shares one cache across requests.
        self._definitions = definitions if definitions is not None else {}
        self._definitions_lock = threading.Lock()
        self._overlays = overlays or {}
        self.partitions = partitions  # None: every partition

    def store(self, name: str) -> StoreDefinition:
        """The store's definition (UnknownStoreError for an undeclared store), cached: at the value
        schema version the pinned snapshot holds, else at the store's current version."""
        if not _STORE_NAME.match(name):  # never let a name walk out of schemas/stores/
            raise UnknownStoreError(name, list_stores(self.settings))
        pinned = getattr(self.reader, "pinned", None)
        info = None if pinned is None else pinned.store_info.get(name)
        if info is not None:
            version = info.value_version if info.value_version is not None else FIRST_VERSION
        else:
            version = current_version(self.settings, name)
        found = self._definitions.get((name, version))
        if found is None:
            found = load_store(self.settings, name, version)
            with self._definitions_lock:
                self._definitions[(name, version)] = found
        return found

    def _table(self, snap: Snapshot, store: StoreDefinition, keys: Sequence[str] | None = None) -> str:
        """What to select from: the store's table, or with an overlay, the table with newer changelog
        rows merged in (a row of the overlay replaces the snapshot's row of the same store key, a
        tombstone removes it). keys: the read selects these keys alone (WHERE "key" IN them), so the
        overlay's other rows are left out before the merge, which then costs the keys' rows rather
        than every row committed since the snapshot."""
        _in_snapshot(snap, store)
        table = quote(store.name)
        overlay = self._overlays.get(store.name)
        if overlay is None or overlay.rows is None:
            return self._in_scope(table)
        name = quote(f"_fresh_{store.name}")
        snap.con.register(f"_fresh_{store.name}", overlay.rows if keys is None else _of_keys(overlay.rows, keys))
        same = " AND ".join(f"f.{quote(c)} = s.{quote(c)}" for c in store_key_columns(store))
        merged = (f"(SELECT * FROM {table} s WHERE NOT EXISTS (SELECT 1 FROM {name} f WHERE {same}) "
                  f"UNION ALL BY NAME SELECT * EXCLUDE ({FRESH_OP}) FROM {name} WHERE {FRESH_OP} = '{OP_PUT}')")
        if not overlay.horizon:
            return self._in_scope(merged)
        # Entries past retention at the newer stream times have left the store (see query/fresh.py).
        cases = " ".join(f"WHEN {int(p)} THEN {int(h)}" for p, h in sorted(overlay.horizon.items()))
        edge = retained_column(backend_of(store).retention_spec(store))  # type: ignore[arg-type]
        return self._in_scope(f"(SELECT * FROM {merged} WHERE {quote(edge)} > "
                              f"coalesce(CASE source_partition {cases} END, {-2**63}))")

    def _in_scope(self, table: str) -> str:
        """The rows of `table` in the scope's source partitions (every row when not scoped)."""
        if self.partitions is None:
            return table
        listed = ", ".join(str(int(p)) for p in sorted(self.partitions)) or "NULL"
        return f"(SELECT * FROM {table} WHERE {quote(SOURCE_PARTITION)} IN ({listed}))"

    def _index(self, snap: Snapshot, store: StoreDefinition) -> StoreIndex | None:
        """The snapshot's read index of the store, unless newer changelog rows overlay it."""
        _in_snapshot(snap, store)
        if store.name in self._overlays:
            return None
        index = snap.index(store.name)
        # An index laid out before partitions were: a scoped read filters in DuckDB instead.
        return None if index is None or (self.partitions is not None and not index.partitioned) else index

    @staticmethod
    def _require(store: StoreDefinition, read: Read, what: str) -> None:
        """StoreTypeError naming `what` and the reads to use instead, unless the store answers `read`."""
        backend = backend_of(store)
        if not backend.answers(read):
            raise StoreTypeError(store.name, store.type, what, backend.read_hint)


__all__ = ["FRESH_OP", "ReadSource", "positive"]
