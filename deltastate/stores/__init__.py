"""Store definitions: what a store is (schemas/stores/*.yaml), validated into frozen objects."""

from deltastate.stores.definition import (
    Aggregation,
    SourceSpec,
    StoreDefinition,
    ValueField,
)
from deltastate.stores.loader import list_stores, load_store

__all__ = ["Aggregation", "SourceSpec", "StoreDefinition", "ValueField", "list_stores", "load_store"]
