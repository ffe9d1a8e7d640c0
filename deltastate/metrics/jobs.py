"""The short-lived jobs' metrics: each record_* takes the report its job already returns, sets the
job's figures, pushes them (when DELTASTATE_PUSHGATEWAY is set) and returns the report unchanged, so
a job module hooks in with one call around the value it returns. Restore reports while it runs,
through a RestoreListener."""

from __future__ import annotations

import time
from datetime import UTC
from typing import Any

from deltastate.config import Settings
from deltastate.metrics import exposition
from deltastate.metrics import names as m

# The reports arrive typed as Any: metrics sits below the job packages that call it (maintenance,
# migration, snapshot) and imports none of them, so the package graph stays acyclic.

# The phases a migration can be in (stores/fence.py), each exported as its own series so a
# dashboard shows the current one as 1 and the others as 0.
MIGRATION_PHASES = ("building", "cutover", "cut-over", "rolled-back", "retired")


def _finished(kind: str, store: str, seconds: float) -> None:
    m.JOB_SECONDS.labels(kind, store).set(seconds)
    m.JOB_DONE.labels(kind, store).set(time.time())


def record_compaction(settings: Settings, report: Any) -> Any:
    store = report.store
    figures = report.after or report.before
    if figures is not None:
        m.CHANGELOG_RECORDS.labels(store).set(figures.records)
        m.CHANGELOG_BYTES.labels(store).set(figures.bytes)
        m.CHANGELOG_FILES.labels(store).set(figures.files)
    ratio = report.dirty_ratio_after if report.dirty_ratio_after is not None else report.dirty_ratio_before
    m.DIRTY_RATIO.labels(store).set(ratio)
    m.COMPACTION_DROPPED.labels(store, "superseded").set(report.records_dropped - report.tombstones_dropped)
    m.COMPACTION_DROPPED.labels(store, "tombstone").set(report.tombstones_dropped)
    m.LAST_COMPACTION.labels(store).set(time.time())
    _finished("compact", store, report.seconds)
    exposition.push(settings, "compact", store)
    return report


def record_cleanup(settings: Settings, report: Any) -> Any:
    m.CLEANUP_EXPIRED.labels(report.store).set(report.tombstones_written)
    m.LAST_CLEANUP.labels(report.store).set(time.time())
    _finished("cleanup", report.store, report.seconds)
    exposition.push(settings, "cleanup", report.store)
    return report


def record_migration(settings: Settings, report: Any) -> Any:
    for phase in {*MIGRATION_PHASES, report.phase}:
        m.MIGRATION_PHASE.labels(report.store, phase).set(1.0 if phase == report.phase else 0.0)
    m.MIGRATION_VERSION.labels(report.store).set(report.to_version)
    lag = _new_version_lag(report.details)
    if lag is not None:
        m.MIGRATION_LAG.labels(report.store, str(report.to_version)).set(lag)
    m.JOB_DONE.labels(f"migrate_{report.action}", report.store).set(time.time())
    exposition.push(settings, "migrate", report.store)
    return report


def _new_version_lag(details: dict[str, Any]) -> int | None:
    """Records the new version has still to read, when the step's details carry it."""
    for key in ("lag", "behind", "records_behind"):
        value = details.get(key)
        if isinstance(value, int | float):
            return int(value)
        if isinstance(value, dict):
            return int(sum(v for v in value.values() if isinstance(v, int | float)))
    return None


def record_snapshot(settings: Settings, info: Any) -> Any:
    published = info.published_at.replace(tzinfo=UTC).timestamp()
    m.PUBLISHED_VERSION.set(info.version)
    m.PUBLISHED_AT.set(published)
    # The publish stamp is taken when the build starts (under the publish lock).
    m.BUILD_SECONDS.set(max(0.0, time.time() - published))
    for s in info.stores:
        m.SNAPSHOT_ROWS.labels(s.store).set(s.row_count)
    _finished("publish", "all", max(0.0, time.time() - published))
    exposition.push(settings, "publish", None)
    return info


class MeteredRestore:
    """A RestoreListener that keeps the restore's figures and pushes them after every slice, then
    passes each call on. The total is the live state count at the restored version, which restore
    computes anyway; counting it here first fills Spark's cache that restore then writes from."""

    def __init__(self, settings: Settings, inner: Any, total: Any = None) -> None:
        self.settings, self.inner = settings, inner
        self.total_of = total  # (store, version) -> live records, or None when unknown
        self.store = ""
        self.started = time.monotonic()
        self.restored = 0
        self.total: int | None = None

    def _publish(self) -> None:
        seconds = max(time.monotonic() - self.started, 1e-9)
        m.RESTORE_RESTORED.labels(self.store).set(self.restored)
        m.RESTORE_SECONDS.labels(self.store).set(seconds)
        m.RESTORE_RATE.labels(self.store).set(self.restored / seconds)
        if self.total is not None:
            m.RESTORE_REMAINING.labels(self.store).set(max(0, self.total - self.restored))
        exposition.push(self.settings, "restore", self.store)

    def on_start(self, store: str, from_changelog_version: int | None, mode: Any) -> None:
        self.store, self.started, self.restored = store, time.monotonic(), 0
        if mode == "full" and from_changelog_version is not None and self.total_of is not None:
            self.total = self.total_of(store, from_changelog_version)
        else:
            self.total = 0  # nothing to rebuild record by record (partial restore or replay)
        self._publish()
        self.inner.on_start(store, from_changelog_version, mode)

    def on_batch(self, records_restored: int, *partition: int | None) -> None:
        """partition: the slice's source partition, passed on as the restore gave it."""
        self.restored += records_restored
        self._publish()
        self.inner.on_batch(records_restored, *partition)

    def on_end(self, total_records: int, seconds: float) -> None:
        self.restored, self.total = total_records, total_records
        _finished("restore", self.store, seconds)
        self._publish()
        self.inner.on_end(total_records, seconds)
