"""A kind of store defined only in the tests, under a store type of its own (`type: key_count`): a
key-value kind whose store in the contract counts events per key (player_stats' games, with its other
aggregations). It is this module and one register_backend call, and the store contract runs it like
the built-in kinds: a new kind touches nothing else in deltastate."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import ClassVar

from deltastate.stores.backends import register_backend, unregister_backend
from deltastate.stores.backends.keyvalue import KeyValueBackend


@dataclass(frozen=True)
class CountingBackend(KeyValueBackend):
    kind: ClassVar[str] = "key_count"
    store_type: ClassVar[str] = "key_count"


COUNTING_BACKEND = CountingBackend()


@contextmanager
def counting_backend_registered() -> Iterator[CountingBackend]:
    """Registered for the block's duration only: the other tests see the built-in kinds."""
    register_backend(COUNTING_BACKEND)
    try:
        yield COUNTING_BACKEND
    finally:
        unregister_backend(COUNTING_BACKEND.kind)
