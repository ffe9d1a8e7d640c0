"""The LRU key-value store (`max_entries: N`, Kafka Streams' Stores.lruMap): at most N keys, split
over the source partitions; the engine evicts the least recently updated key of a full partition
by a changelog delete whose reason column says 'evicted'."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from deltastate.stores.backends.columns import DELETE_REASON
from deltastate.stores.backends.keyvalue import KeyValueBackend

if TYPE_CHECKING:
    from deltastate.stores.definition import StoreDefinition


@dataclass(frozen=True)
class LruBackend(KeyValueBackend):
    kind: ClassVar[str] = "lru"
    delete_reason_columns: ClassVar[tuple[str, ...]] = (DELETE_REASON,)
    evicts: ClassVar[bool] = True
    # A new version would be seeded from state that evictions shaped under the old bound.
    migratable: ClassVar[bool] = False

    def partition_capacities(self, store: StoreDefinition) -> tuple[int, ...] | None:
        return tuple(store.lru_capacity(p) for p in range(store.source.partitions))

    def latest_refusal(self, store: StoreDefinition) -> str | None:
        # Which key an uncommitted record evicts depends on the other keys' records, not the key's own.
        return (f"store {store.name!r} is an LRU store (max_entries): its evictions depend on every key's records; "
                "use committed")


LRU_BACKEND = LruBackend()
