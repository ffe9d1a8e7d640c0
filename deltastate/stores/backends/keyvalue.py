"""The key-value store (Kafka Streams' persistent KeyValueStore): one entry per key, kept in Spark's
state store and logged to the changelog, which restore, snapshots and fresh reads fold."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from deltastate.stores.backends.base import KEY_VALUE, Family, StoreBackend
from deltastate.stores.backends.columns import KEY_ONLY


@dataclass(frozen=True)
class KeyValueBackend(StoreBackend):
    """Every fact is the base's default: the other key-value backends start from this one."""

    kind: ClassVar[str] = "key_value"
    store_type: ClassVar[str] = "key_value"
    family: ClassVar[Family] = KEY_VALUE
    key_column_types: ClassVar[tuple[tuple[str, str], ...]] = KEY_ONLY


KEY_VALUE_BACKEND = KeyValueBackend()
