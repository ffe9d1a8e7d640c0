"""StoreBackend: what a kind of store means to the code around it, asked instead of its definition.

The kind of a store (key-value, LRU, without changelog, window, session) follows from a few keys of
its definition (`type`, `max_entries`, `changelog.enabled`); registry.backend_of reads them once.
Everything else (the engine, restore, cleanup, snapshots, reads, quality suites) asks the backend for
the one fact it needs: which columns key an entry, where the live state is kept, what restore and
publish read, which reads are answered. A new kind of store is then one more backend module, not a
new branch in every caller.

A backend is a stateless, immutable singleton: the facts are class attributes, and the few answers
that depend on the store (its retention spec, its messages) are methods taking the definition.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Literal

if TYPE_CHECKING:
    from deltastate.stores.definition import SessionSpec, StoreDefinition, WindowSpec

# The snapshot reads of the query layer (query/indexed.py, query/scans.py) a backend may answer.
Read = Literal["get", "top", "rank", "range", "all", "windows", "sessions"]
KEY_READS: frozenset[Read] = frozenset({"get", "top", "rank", "range", "all"})

# How restore rebuilds a store: "full" rebuilds the state from the changelog into a seed, "partial"
# only the source offsets (the state is the changelog), "replay" reads the source topic again.
RestoreMode = Literal["full", "partial", "replay"]

# The two families of stores quality suites tell apart (schemas/quality/*.json, "when").
Family = Literal["key_value", "windowed"]
KEY_VALUE: Family = "key_value"
WINDOWED: Family = "windowed"
FAMILIES: tuple[Family, ...] = (KEY_VALUE, WINDOWED)

# The engine package that runs the store's streaming query (deltastate/engine/<name>).
Engine = Literal["keyvalue", "windowed"]

# Where snapshot publish reads a store's state from.
SnapshotSource = Literal["changelog", "state_store"]
FROM_CHANGELOG: SnapshotSource = "changelog"
FROM_STATE_STORE: SnapshotSource = "state_store"

# How cleanup expires a store's old entries: "ttl" produces Kafka tombstones for keys not updated
# within the store's ttl (maintenance/ttl.py); "retention" appends changelog tombstones for the
# windows or sessions past retention (maintenance/retention.py).
Expiry = Literal["ttl", "retention"]
TTL: Expiry = "ttl"
RETENTION: Expiry = "retention"

# The message of a store without changelog refusing a read that needs one (fresh, latest).
_NO_CHANGELOG = ("store {name!r} keeps no changelog (changelog.enabled: false): only its published snapshot "
                 "can be read")


@dataclass(frozen=True)
class StoreBackend:
    """The base every backend extends; its defaults are those of a logged key-value store."""

    kind: ClassVar[str]  # the backend's own name (docs, reports, tests)
    # The block of the store file this kind requires and no other kind takes ("window", "session").
    definition_block: ClassVar[str | None] = None
    store_type: ClassVar[str]  # the definition's `type:` the backend serves
    family: ClassVar[Family]
    # (name, Spark SQL type) of the columns that identify one state entry, key first.
    key_column_types: ClassVar[tuple[tuple[str, str], ...]]
    # Columns an entry carries beside its values so that a merge can read them back.
    entry_count_columns: ClassVar[tuple[str, ...]] = ()
    # Columns a changelog delete carries to say why it was written (after the bookkeeping columns).
    delete_reason_columns: ClassVar[tuple[str, ...]] = ()
    has_changelog: ClassVar[bool] = True
    # True: the live state is kept in Spark's state store (the checkpoint holds it, restore seeds it);
    # False: the changelog is the state and the engine reads it back each micro-batch.
    spark_state: ClassVar[bool] = True
    engine: ClassVar[Engine] = "keyvalue"
    # True: the engine evicts the least recently updated keys to stay within a bound.
    evicts: ClassVar[bool] = False
    reads: ClassVar[frozenset[Read]] = KEY_READS
    read_hint: ClassVar[str] = "use get/range/all"  # what to use instead of a refused read
    read_index: ClassVar[bool] = True  # publish builds a sorted key index for point reads and leaderboards
    restore_mode: ClassVar[RestoreMode] = "full"
    snapshot_source: ClassVar[SnapshotSource] = FROM_CHANGELOG
    # A value schema migration seeds the new version from the old one's changelog state.
    migratable: ClassVar[bool] = True
    expiry: ClassVar[Expiry] = TTL
    expired_counter: ClassVar[str] = "expired_keys"  # the CleanupReport field cleanup counts into
    # The lineage_id of the tombstones cleanup appends to the changelog (None: it appends none).
    cleanup_lineage_id: ClassVar[str | None] = None

    @property
    def key_columns(self) -> tuple[str, ...]:
        """The columns that identify one state entry: the key, plus the window or session bounds."""
        return tuple(name for name, _ in self.key_column_types)

    def answers(self, read: Read) -> bool:
        return read in self.reads

    def retention_spec(self, store: StoreDefinition) -> WindowSpec | SessionSpec | None:
        """The spec whose retention bounds the store's entries; None when entries live until deleted."""
        return None

    def partition_capacities(self, store: StoreDefinition) -> tuple[int, ...] | None:
        """How many keys each source partition may hold; None when the store keeps every key."""
        return None

    def latest_refusal(self, store: StoreDefinition) -> str | None:
        """Why a read at consistency=latest is refused for the store; None when it is answered."""
        return None

    def fresh_refusal(self, store: StoreDefinition) -> str | None:
        """Why a fresh read (changelog newer than the snapshot) is refused; None when it is answered."""
        return None


def no_changelog_message(store: StoreDefinition) -> str:
    return _NO_CHANGELOG.format(name=store.name)
