"""A key-value store's `state:` block: which Spark state store provider keeps its state, and the
RocksDB options of that provider, as Spark's own configuration keys.

Spark copies the session's configuration into a streaming query when the query starts, so settings
applied to the session right before `start()` belong to that query alone; `applied_to` sets them for
the start and puts the session back afterwards, so two stores in one process keep their own.
A query restarted from a checkpoint takes its provider from the checkpoint's offset log, so the
provider of a running store cannot change (loader and engine refuse it with the reason); RocksDB
options may change between runs.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, fields

PROVIDER_KEY = "spark.sql.streaming.stateStore.providerClass"
PROVIDERS = {
    "rocksdb": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    "memory": "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
}
ROCKSDB_PREFIX = "spark.sql.streaming.stateStore.rocksdb."
COMPRESSION_CODECS = ("none", "snappy", "zlib", "bzip2", "lz4", "lz4hc", "xpress", "zstd")


@dataclass(frozen=True)
class RocksDBOptions:
    """The RocksDB options Spark exposes (spark.sql.streaming.stateStore.rocksdb.*), in snake case.
    Unset options take Spark's default, except the two below whose defaults suit changelogs:
    changelog checkpointing (a batch uploads its changed keys, not a RocksDB snapshot) and lz4.
    The store file's `state.rocksdb` block is checked by schema.py's RocksDBModel before it gets here."""

    changelog_checkpointing: bool = True
    compression: str = "lz4"  # one of COMPRESSION_CODECS
    format_version: int | None = None
    block_size_kb: int | None = None
    block_cache_size_mb: int | None = None
    write_buffer_size_mb: int | None = None
    max_write_buffer_number: int | None = None
    bounded_memory_usage: bool | None = None
    max_memory_usage_mb: int | None = None
    write_buffer_cache_ratio: float | None = None
    high_priority_pool_ratio: float | None = None
    compact_on_commit: bool | None = None
    track_total_number_of_rows: bool | None = None
    max_open_files: int | None = None


# snake-case option -> Spark's key suffix; one table so that the names a user writes and the
# keys Spark reads cannot drift apart.
SPARK_NAMES = {
    "changelog_checkpointing": "changelogCheckpointing.enabled",
    "compression": "compression",
    "format_version": "formatVersion",
    "block_size_kb": "blockSizeKB",
    "block_cache_size_mb": "blockCacheSizeMB",
    "write_buffer_size_mb": "writeBufferSizeMB",
    "max_write_buffer_number": "maxWriteBufferNumber",
    "bounded_memory_usage": "boundedMemoryUsage",
    "max_memory_usage_mb": "maxMemoryUsageMB",
    "write_buffer_cache_ratio": "writeBufferCacheRatio",
    "high_priority_pool_ratio": "highPriorityPoolRatio",
    "compact_on_commit": "compactOnCommit",
    "track_total_number_of_rows": "trackTotalNumberOfRows",
    "max_open_files": "maxOpenFiles",
}
assert set(SPARK_NAMES) == {f.name for f in fields(RocksDBOptions)}


@dataclass(frozen=True)
class StateSettings:
    """provider, RocksDB options, and max_memory: a bound on RocksDB's memory (block cache, write
    buffers and index blocks together, in MB), Spark's bounded memory usage. Spark shares that bound
    across the RocksDB instances of the executor, so it is a per-process limit. The store file's
    `state:` block is checked by schema.py's StateModel (which also parses '512MB') first."""

    provider: str = "rocksdb"  # a key of PROVIDERS
    max_memory: int | None = None  # MB
    rocksdb: RocksDBOptions | None = None

    @property
    def provider_class(self) -> str:
        return PROVIDERS[self.provider]

    def spark_conf(self) -> dict[str, str | None]:
        """Every state key deltastate manages -> its value for this store, None for Spark's default."""
        conf: dict[str, str | None] = {PROVIDER_KEY: self.provider_class}
        options = self.rocksdb if self.rocksdb is not None else RocksDBOptions()
        for name, suffix in SPARK_NAMES.items():
            value = getattr(options, name) if self.provider == "rocksdb" else None
            conf[ROCKSDB_PREFIX + suffix] = None if value is None else _spark_text(value)
        if self.max_memory is not None:
            conf[ROCKSDB_PREFIX + SPARK_NAMES["bounded_memory_usage"]] = "true"
            conf[ROCKSDB_PREFIX + SPARK_NAMES["max_memory_usage_mb"]] = str(self.max_memory)
        return conf

    @contextlib.contextmanager
    def applied_to(self, spark) -> Iterator[None]:
        """Sets this store's state keys on the session for the duration of a query start, then
        restores the session's own values. Starts are serialised so two stores never see each
        other's keys."""
        with _START_LOCK:
            previous = {key: spark.conf.get(key, None) for key in self.spark_conf()}
            try:
                for key, value in self.spark_conf().items():
                    _set(spark, key, value)
                yield
            finally:
                for key, value in previous.items():
                    _set(spark, key, value)

    def started_with(self, query) -> dict[str, str | None]:
        """The state keys as the started query sees them, read from the session copy Spark took at
        start (StreamExecution.sparkSessionForStream; the query's public sparkSession is the caller's)."""
        session_conf = query._jsq.streamingQuery().sparkSessionForStream().conf()
        return {key: _option(session_conf.getOption(key)) for key in self.spark_conf()}


def _spark_text(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


DEFAULT_STATE = StateSettings()
_START_LOCK = threading.Lock()


def _set(spark, key: str, value: str | None) -> None:
    if value is None:
        spark.conf.unset(key)
    else:
        spark.conf.set(key, value)


def _option(java_option) -> str | None:
    return java_option.get() if java_option.isDefined() else None
