"""The frozen shape of a store definition; parse.py builds it from YAML and checks it, loader.py serves it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from deltastate.stores.ops import FOLD_OPS, WINDOWED_ONLY_OPS
from deltastate.stores.state import StateSettings

__all__ = ["FOLD_OPS", "WINDOWED_ONLY_OPS"]  # ops are declared in ops.py; store types by the backends
VALUE_TYPES = {"long": "bigint", "double": "double", "string": "string"}


@dataclass(frozen=True)
class SourceSpec:
    topic: str
    partitions: int
    key_field: str
    event_schema_name: str
    event_schema: dict[str, Any] = field(repr=False, compare=False, hash=False)

    @property
    def properties(self) -> dict[str, dict[str, Any]]:
        return self.event_schema.get("properties", {})

    @property
    def required(self) -> tuple[str, ...]:
        return tuple(self.event_schema.get("required", ()))


@dataclass(frozen=True)
class ValueField:
    name: str
    type: str  # one of VALUE_TYPES

    @property
    def spark_type(self) -> str:
        return VALUE_TYPES[self.type]


@dataclass(frozen=True)
class Aggregation:
    """value field <- op(event field); count takes no event field."""

    target: str
    op: str
    source_field: str | None


@dataclass(frozen=True)
class DerivedField:
    """value field <- an expression over the store's aggregated value fields (stores/expression.py),
    computed on every changelog record the store writes."""

    target: str
    expression: str


@dataclass(frozen=True)
class MigrationStep:
    """How value schema version `version` was obtained from `version - 1` (stores/versions.py)."""

    version: int
    renamed: tuple[tuple[str, str], ...] = ()  # (old name, new name)
    derived: tuple[str, ...] = ()  # fields this step starts deriving
    added: tuple[str, ...] = ()  # aggregations this step adds (replayed, or a default going forward)
    defaults: tuple[tuple[str, int | float | str], ...] = ()
    dropped: tuple[str, ...] = ()
    widened: tuple[tuple[str, str, str], ...] = ()  # (field, old type, new type)
    retire_after_ms: int = 7 * 86_400_000


@dataclass(frozen=True)
class ChangelogOptions:
    min_compaction_lag_ms: int
    min_cleanable_dirty_ratio: float
    delete_retention_ms: int
    # False: the store writes no changelog (Kafka Streams' withLoggingDisabled). Snapshots read its
    # Spark state store; restore replays the source topic; fresh reads are not available.
    enabled: bool = True


@dataclass(frozen=True)
class WindowSpec:
    """Kafka Streams TimeWindows: epoch-aligned [start, start + size), a new window every advance
    (advance == size: tumbling). A window closes when stream time >= end + grace; retention is
    Kafka Streams' window store's (changelog/rules.py)."""

    size_ms: int
    advance_ms: int
    grace_ms: int
    retention_ms: int

    @property
    def tumbling(self) -> bool:
        return self.advance_ms == self.size_ms


@dataclass(frozen=True)
class SessionSpec:
    """Kafka Streams SessionWindows: events at most gap apart share a session (inclusive, as
    findSessions); an event is late when its merged session ends before stream time - grace - gap
    (engine/windowed/lateness.py); retention is Kafka Streams' session store's (changelog/rules.py)."""

    gap_ms: int
    grace_ms: int
    retention_ms: int


@dataclass(frozen=True)
class TombstoneRule:
    """When a record deletes its key: 'null_value' (the Kafka way) and, optionally, a field value
    (e.g. event == "checkout"); for window and session stores it deletes all of the key's windows."""

    null_value: bool = True
    field: str | None = None
    equals: str | None = None


@dataclass(frozen=True)
class StoreDefinition:
    name: str
    type: str
    description: str
    source: SourceSpec
    value_schema_name: str
    value_version: int
    value_fields: tuple[ValueField, ...]
    aggregations: tuple[Aggregation, ...]
    event_time_field: str
    tombstone: str
    changelog: ChangelogOptions
    state: StateSettings
    leaderboard_default_by: str | None
    ttl_ms: int | None = None
    window: WindowSpec | None = None
    session: SessionSpec | None = None
    tombstone_rule: TombstoneRule = TombstoneRule()
    # LRU key-value store (Kafka Streams' Stores.lruMap): at most max_entries keys, split over the
    # source partitions (see lru_capacity); None keeps every key.
    max_entries: int | None = None
    derived: tuple[DerivedField, ...] = ()
    # Value schema versions: the ones the store file declares, and the steps from the first to this one.
    versions: tuple[int, ...] = (1,)
    history: tuple[MigrationStep, ...] = ()

    @property
    def storage(self) -> str:
        """The folder name of this version's tables and checkpoint: the store's name for its first
        version, NAME.vN for a version a migration builds beside it."""
        return self.name if self.value_version == self.versions[0] else f"{self.name}.v{self.value_version}"

    @property
    def aggregated_columns(self) -> tuple[str, ...]:
        return tuple(a.target for a in self.aggregations)

    @property
    def key_field(self) -> str:
        return self.source.key_field

    @property
    def value_columns(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.value_fields)

    def value_field(self, name: str) -> ValueField:
        for f in self.value_fields:
            if f.name == name:
                return f
        raise KeyError(name)

    def lru_capacity(self, partition: int) -> int:
        """How many keys source partition `partition` may hold: max_entries split evenly over the
        declared partitions, the remainder to the lowest ones, so the partitions hold max_entries in all.
        A key lives in one partition (Kafka's key partitioning), so each partition evicts on its own."""
        if self.max_entries is None:
            raise ValueError(f"store {self.name!r} keeps every key (no max_entries)")
        parts = self.source.partitions
        return self.max_entries // parts + (1 if partition % parts < self.max_entries % parts else 0)

    @property
    def numeric_columns(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.value_fields if f.type in ("long", "double"))
