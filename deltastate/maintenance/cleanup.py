"""`cleanup`: removes what a store should no longer hold, always by tombstones through the changelog
(never a silent delete), so restore, snapshots and queries agree.

key_value  TTL (StoreDefinition.ttl_ms): Kafka tombstones to the source topic, see ttl.py.
window     retention (WindowSpec.retention_ms): changelog tombstones, see retention.py.
session    expiry (SessionSpec.retention_ms): changelog tombstones, see retention.py.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from deltastate import metrics
from deltastate.changelog import layout
from deltastate.changelog.layout import SOURCE_OFFSET, SOURCE_PARTITION, WRITE_TIME
from deltastate.config import Settings
from deltastate.maintenance import retention, ttl
from deltastate.maintenance.log_retention import maintain_logs
from deltastate.maintenance.stats import get_session
from deltastate.maintenance.stats import now_ms as clock_ms
from deltastate.report import Report
from deltastate.stores import load_store
from deltastate.stores.backends import TTL, backend_of
from deltastate.stores.definition import StoreDefinition

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass(frozen=True)
class CleanupReport(Report):
    store: str
    store_type: str
    read_version: int | None
    expired_keys: int = 0  # key_value: ttl tombstones produced to the source topic
    expired_windows: int = 0  # window: tombstones appended to the changelog
    expired_sessions: int = 0  # session: tombstones appended to the changelog
    tombstones_written: int = 0
    candidates: int = 0  # key_value: keys past the ttl in the changelog
    spared: int = 0  # key_value: candidates with a record the stream has not applied yet
    tail_records: int = 0  # key_value: records read between the changelog and the topic's end
    raced: tuple[str, ...] = field(default_factory=tuple)  # key_value: see ttl.py
    seconds: float = 0.0
    skipped: str | None = None


def cleanup_store(settings: Settings, store_name: str, *, spark: SparkSession | None = None,
                  now_ms: int | None = None, topic: str | None = None) -> CleanupReport:
    """Expires the store's old entries by tombstones; `topic` overrides the source topic (ttl only)."""
    store = load_store(settings, store_name)
    report = _nothing_to_expire(settings, store)
    if report is None:
        report = cleanup_definition(get_session(settings, spark), settings, store, now=now_ms, topic=topic)
    return metrics.record_cleanup(settings, report)


def _nothing_to_expire(settings: Settings, store: StoreDefinition) -> CleanupReport | None:
    """The report of a TTL store that declares no ttl, its version read from a local changelog's log
    (a command does not start Spark to say there is nothing to do); None when the store may have
    something to expire or its changelog is not local."""
    from deltastate.changelog.deltalog import local_dir, newest_version

    path = settings.table_path(store.storage, layout.CHANGELOG)
    if not _declares_no_ttl(store) or local_dir(path) is None:
        return None
    started = time.monotonic()
    version = newest_version(path)
    return _done(CleanupReport(store.name, store.type, version), started,
                 skipped="no ttl declared" if version is not None else "no changelog table yet")


def _declares_no_ttl(store: StoreDefinition) -> bool:
    """A store whose entries expire by TTL but which declares none: cleanup has nothing to do."""
    return backend_of(store).expiry == TTL and not store.ttl_ms


def cleanup_definition(spark: SparkSession, settings: Settings, store: StoreDefinition, *,
                       now: int | None = None, topic: str | None = None) -> CleanupReport:
    from deltastate.changelog.reader import changelog_version

    started = time.monotonic()
    version = changelog_version(spark, settings.table_path(store.storage, layout.CHANGELOG))
    base = CleanupReport(store.name, store.type, version)
    if version is None:
        return _done(base, started, skipped="no changelog table yet")
    if _declares_no_ttl(store):
        return _done(base, started, skipped="no ttl declared")
    backend = backend_of(store)
    if backend.expiry == TTL:
        report = _expire_ttl(spark, settings, store, version, clock_ms() if now is None else now,
                             topic or store.source.topic)
        maintain_logs(spark, settings, store, clean_now=True)
        return _done(report, started)
    written = retention.expire_windows(spark, settings, store, version, write_ms=clock_ms())
    maintain_logs(spark, settings, store, clean_now=True)
    counter = backend.expired_counter  # expired_windows or expired_sessions
    return _done(CleanupReport(**{**asdict(base), counter: written, "tombstones_written": written}), started)


def _done(report: CleanupReport, started: float, **changes: Any) -> CleanupReport:
    data = {**asdict(report), "seconds": time.monotonic() - started, **changes}
    data["raced"] = tuple(data["raced"])
    return CleanupReport(**data)


def _expire_ttl(spark: SparkSession, settings: Settings, store: StoreDefinition, version: int, now: int,
                topic: str) -> CleanupReport:
    from pyspark.sql import functions as F

    from deltastate.changelog.reader import latest_state

    path = settings.table_path(store.storage, layout.CHANGELOG)
    state = latest_state(spark, settings, store, version)
    candidates = sorted(r[layout.KEY] for r in state.where(F.unix_millis(WRITE_TIME) < F.lit(now - store.ttl_ms))
                        .select(layout.KEY).collect())
    # Highest source offset the changelog at V holds per partition: everything after it may not be
    # applied yet (the stream's lag), so cleanup reads it before deciding.
    held = {int(r[0]): int(r[1]) for r in spark.read.format("delta").option("versionAsOf", version).load(path)
            .groupBy(SOURCE_PARTITION).agg(F.max(SOURCE_OFFSET)).collect() if r[0] is not None}
    from deltastate.infra.topics import end_offsets

    ends = end_offsets(settings.kafka_bootstrap, topic)  # a partition the broker lacks has no tail to read
    tail = ttl.scan(settings.kafka_bootstrap, store.name, topic,
                    {p: (held.get(p, -1) + 1, ends.get(p, 0)) for p in range(store.source.partitions)})
    spared = ttl.spared_keys(tail) & set(candidates)
    doomed = [k for k in candidates if k not in spared]
    placed = ttl.produce_tombstones(settings.kafka_bootstrap, store.name, topic, doomed) if doomed else {}
    raced: list[str] = []
    if placed:
        last = {p: max(off for part, off in placed.values() if part == p) for p in {v[0] for v in placed.values()}}
        after = ttl.scan(settings.kafka_bootstrap, store.name, topic, {p: (ends[p], last[p] + 1) for p in last})
        raced = ttl.raced_keys(after, placed)
    return CleanupReport(store.name, store.type, version, expired_keys=len(placed), tombstones_written=len(placed),
                         candidates=len(candidates), spared=len(spared), tail_records=len(tail), raced=tuple(raced))
