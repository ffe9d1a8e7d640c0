"""The shape of a store definition file (schemas/stores/NAME.yaml) as strict pydantic models.

Every key is declared: an unknown or misplaced key (a misspelt `retenion:`), a wrong type or a value
outside what is allowed is refused, never replaced by a default. Rules that relate several keys of the
file to each other (advance <= size, retention >= size + grace, which blocks a store type takes) live
here too; rules that need the event and value schemas live in parse.py.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from deltastate.stores.backends.base import KEY_VALUE
from deltastate.stores.backends.keyvalue import KEY_VALUE_BACKEND
from deltastate.stores.backends.registry import backends, store_types, type_backend
from deltastate.stores.definition import FOLD_OPS
from deltastate.stores.durations import parse_duration_ms
from deltastate.stores.state import COMPRESSION_CODECS, PROVIDERS, SPARK_NAMES, RocksDBOptions, StateSettings


def _duration(value: object) -> int:
    if value is None:
        raise ValueError("a duration is required (e.g. 500ms, 5s, 30min, 6h, 7d)")
    return parse_duration_ms(value)  # type: ignore[arg-type]


DurationMs = Annotated[int, BeforeValidator(_duration)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class SourceModel(Strict):
    topic: str = Field(min_length=1)
    partitions: int = Field(4, ge=1, le=10_000)
    key_field: str = Field(min_length=1)
    event_schema: str = Field(min_length=1)


class ValueModel(Strict):
    schema_name: str = Field(alias="schema", min_length=1)


class AggregationModel(Strict):
    op: Literal[FOLD_OPS]  # type: ignore[valid-type]
    field: str | None = None

    @model_validator(mode="after")
    def _field_matches_op(self) -> AggregationModel:
        if self.op == "count" and self.field is not None:
            raise ValueError(f"count reads no field (got field {self.field!r})")
        if self.op != "count" and self.field is None:
            raise ValueError(f"{self.op} needs an event field: {{op: {self.op}, field: NAME}}")
        return self


class FieldTombstoneModel(Strict):
    """A record whose `field` equals `equals` deletes its key (a null value still deletes too)."""

    field: str = Field(min_length=1)
    equals: str
    null_value: bool = True


class LeaderboardModel(Strict):
    default_by: str | None = None


class ChangelogModel(Strict):
    """Named after their Kafka topic-config equivalents; enabled: false is Kafka Streams'
    withLoggingDisabled (the state lives only in the Spark state store)."""

    enabled: bool = True
    min_compaction_lag: DurationMs = 0
    min_cleanable_dirty_ratio: float = Field(0.5, ge=0.0, le=1.0)
    delete_retention: DurationMs = 86_400_000


class WindowModel(Strict):
    size: DurationMs = Field(gt=0)
    advance: DurationMs | None = Field(None, gt=0)
    grace: DurationMs = 0
    retention: DurationMs = 86_400_000

    @model_validator(mode="after")
    def _consistent(self) -> WindowModel:
        advance = self.size if self.advance is None else self.advance
        if advance > self.size or self.size % advance:
            raise ValueError(f"advance ({advance} ms) must divide size ({self.size} ms)")
        if self.retention < self.size + self.grace:
            raise ValueError(f"retention ({self.retention} ms) must be at least size + grace "
                             f"({self.size + self.grace} ms), as in Kafka Streams")
        return self


class SessionModel(Strict):
    gap: DurationMs = Field(gt=0)
    grace: DurationMs = 0
    retention: DurationMs = 86_400_000

    @model_validator(mode="after")
    def _consistent(self) -> SessionModel:
        if self.retention < self.gap + self.grace:
            raise ValueError(f"retention ({self.retention} ms) must be at least gap + grace "
                             f"({self.gap + self.grace} ms), as in Kafka Streams")
        return self


# What a migration cannot change: the key, the store type and the window or session shape decide
# which state rows exist, so changing them is a new store replayed from the topic, not a new version.
_NOT_MIGRATABLE = {
    "key_field": "the key decides which rows the store holds",
    "type": "the store type decides how state is kept",
    "source": "the source decides which records the store folds",
    "window": "the window size and advance decide which windows exist",
    "session": "the session gap decides which sessions exist",
    "tombstone": "the tombstone rule decides which keys exist",
}


class MigrationModel(Strict):
    """How value schema version `version` is obtained from the version before it."""

    version: int = Field(ge=2)
    value_schema: str = Field(min_length=1)
    rename: dict[str, str] = {}
    derive: dict[str, str] = {}
    aggregations: dict[str, AggregationModel] = {}
    defaults: dict[str, int | float | str] = {}
    drop: list[str] = []
    retire_after: DurationMs = 7 * 86_400_000

    @model_validator(mode="before")
    @classmethod
    def _only_value_changes(cls, data: object) -> object:
        if isinstance(data, dict):
            for key, why in _NOT_MIGRATABLE.items():
                if key in data:
                    raise ValueError(f"a migration cannot change {key!r}: {why}; declare a new store "
                                     "(schemas/stores/NEW.yaml) and replay the topic into it")
        return data

    @model_validator(mode="after")
    def _defaults_for_added(self) -> MigrationModel:
        unknown = set(self.defaults) - set(self.aggregations)
        if unknown:
            raise ValueError(f"defaults {sorted(unknown)} name no aggregation this migration adds "
                             f"(adds: {sorted(self.aggregations) or 'none'})")
        return self


class RocksDBModel(Strict):
    """The `state.rocksdb` block: RocksDB options Spark exposes, with their allowed ranges."""

    changelog_checkpointing: bool = True
    compression: Literal[COMPRESSION_CODECS] = "lz4"  # type: ignore[valid-type]
    format_version: int | None = Field(None, ge=1, le=6)
    block_size_kb: int | None = Field(None, ge=1)
    block_cache_size_mb: int | None = Field(None, ge=1)
    write_buffer_size_mb: int | None = Field(None, ge=1)
    max_write_buffer_number: int | None = Field(None, ge=1)
    bounded_memory_usage: bool | None = None
    max_memory_usage_mb: int | None = Field(None, ge=1)
    write_buffer_cache_ratio: float | None = Field(None, gt=0.0, lt=1.0)
    high_priority_pool_ratio: float | None = Field(None, ge=0.0, lt=1.0)
    compact_on_commit: bool | None = None
    track_total_number_of_rows: bool | None = None
    max_open_files: int | None = Field(None, ge=-1)

    @model_validator(mode="after")
    def _memory_limit_needs_bound(self) -> RocksDBModel:
        if self.max_memory_usage_mb is not None and not self.bounded_memory_usage:
            raise ValueError("max_memory_usage_mb takes effect only with bounded_memory_usage: true")
        return self

    def options(self) -> RocksDBOptions:
        return RocksDBOptions(**{name: getattr(self, name) for name in SPARK_NAMES})


assert set(SPARK_NAMES) == set(RocksDBModel.model_fields)


def _megabytes(value: object) -> int:
    """'512MB', '2GB', '1024KB' or an int of MB -> MB."""
    if isinstance(value, bool):
        raise ValueError(f"not a size: {value!r}")
    if isinstance(value, int):
        return value
    match = re.fullmatch(r"\s*(\d+)\s*(KB|MB|GB)\s*", str(value), flags=re.IGNORECASE)
    if not match:
        raise ValueError(f"not a size: {value!r} (use e.g. 512MB, 2GB)")
    number, unit = int(match.group(1)), match.group(2).upper()
    return {"KB": max(1, number // 1024), "MB": number, "GB": number * 1024}[unit]


class StateModel(Strict):
    """The `state:` block of a key-value store (stores/state.py says what each setting does)."""

    provider: Literal[tuple(PROVIDERS)] = "rocksdb"  # type: ignore[valid-type]
    max_memory: Annotated[int, BeforeValidator(_megabytes), Field(ge=1)] | None = None  # MB
    rocksdb: RocksDBModel | None = None

    @model_validator(mode="after")
    def _options_match_provider(self) -> StateModel:
        if self.provider != "rocksdb" and self.rocksdb is not None:
            raise ValueError(f"'rocksdb' options apply to provider rocksdb only (provider is {self.provider!r})")
        if self.provider != "rocksdb" and self.max_memory is not None:
            raise ValueError("max_memory bounds RocksDB's memory: it applies to provider rocksdb only")
        if self.max_memory is not None and self.rocksdb is not None and (
                self.rocksdb.max_memory_usage_mb is not None or self.rocksdb.bounded_memory_usage is not None):
            raise ValueError("give max_memory or rocksdb.bounded_memory_usage/max_memory_usage_mb, not both")
        return self

    def settings(self) -> StateSettings:
        return StateSettings(self.provider, self.max_memory, None if self.rocksdb is None else self.rocksdb.options())


class StoreFileModel(Strict):
    name: str | None = None
    type: str  # a registered backend's store type (stores/backends/registry.py)
    description: str = ""
    source: SourceModel
    value: ValueModel
    aggregations: dict[str, AggregationModel] = Field(min_length=1)
    event_time_field: str = "ts"
    tombstone: Literal["null_value"] | FieldTombstoneModel = "null_value"
    leaderboard: LeaderboardModel = LeaderboardModel()
    changelog: ChangelogModel = ChangelogModel()
    state: StateModel | None = None
    ttl: DurationMs | None = None
    max_entries: int | None = Field(None, ge=1)
    window: WindowModel | None = None
    session: SessionModel | None = None
    migrations: list[MigrationModel] = []

    @field_validator("type")
    @classmethod
    def _known_type(cls, value: str) -> str:
        if type_backend(value) is None:
            raise ValueError(f"unknown store type {value!r}; types: {', '.join(repr(t) for t in store_types())}")
        return value

    @model_validator(mode="after")
    def _blocks_match_type(self) -> StoreFileModel:
        backend = type_backend(self.type)
        assert backend is not None  # _known_type
        blocks = {b.definition_block for b in backends()} - {None}
        for block in sorted(blocks):
            present = getattr(self, block) is not None
            if block == backend.definition_block and not present:
                raise ValueError(f"a {self.type} store needs a {block!r} block")
            if block != backend.definition_block and present:
                raise ValueError(f"a {self.type} store takes no {block!r} block")
        if backend.family != KEY_VALUE:
            if self.state is not None:
                raise ValueError("'state' applies to key_value stores only: window and session stores keep "
                                 "their state in the changelog, not in a Spark state store")
            if self.max_entries is not None:
                raise ValueError("'max_entries' applies to key_value stores only: window and session stores are "
                                 "bounded by their retention")
            if self.ttl is not None:
                raise ValueError("'ttl' applies to key_value stores only: window and session stores expire "
                                 "by their retention")
        # max_entries and changelog.enabled pick a variant of the built-in key-value type (registry.backend_of).
        if self.max_entries is not None and self.type != KEY_VALUE_BACKEND.store_type:
            raise ValueError(f"'max_entries' applies to {KEY_VALUE_BACKEND.store_type} stores only")
        if not self.changelog.enabled and self.type != KEY_VALUE_BACKEND.store_type:
            raise ValueError("changelog.enabled: false applies to key_value stores only: window and session stores "
                             "keep their state in the changelog")
        if not self.changelog.enabled and self.ttl is not None:
            raise ValueError("changelog.enabled: false cannot be combined with ttl: ttl finds expired keys by their "
                             "latest changelog write")
        if not self.changelog.enabled and self.max_entries is not None:
            raise ValueError("changelog.enabled: false cannot be combined with max_entries: an LRU store's evictions "
                             "are changelog deletes")
        if self.max_entries is not None and self.max_entries < self.source.partitions:
            raise ValueError(f"max_entries ({self.max_entries}) must be at least source.partitions "
                             f"({self.source.partitions}): each partition keeps max_entries / partitions keys")
        if isinstance(self.tombstone, FieldTombstoneModel) and backend.family == KEY_VALUE:
            raise ValueError("a field tombstone rule is only available to window and session stores")
        return self

    @model_validator(mode="after")
    def _migrations_in_order(self) -> StoreFileModel:
        for i, m in enumerate(self.migrations):
            if i and m.version != self.migrations[i - 1].version + 1:
                raise ValueError(f"migrations: version {m.version} follows version {self.migrations[i - 1].version}; "
                                 "each migration produces the next version")
        if self.migrations and (not self.changelog.enabled or self.max_entries is not None):
            raise ValueError("migrations need a logged store that keeps every key (no max_entries, changelog "
                             "enabled): a new version is seeded from the changelog")
        return self
