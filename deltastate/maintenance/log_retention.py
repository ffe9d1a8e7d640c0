"""When a store's Delta logs are cleaned, and which commits every cleanup keeps.

changelog/log_cleanup.py deletes log files past a table's log retention (its
`deltastate.logRetentionDuration`); some commits inside that window must stay longer, because a
reader follows them from the log itself:
  * the changelog commits whose audits the intake table has not copied yet (changelog/audit_log.py
    copies them from the commits' userMetadata);
  * the changelog and intake versions the retained DuckDB snapshots were built from, and every commit
    after them: fresh reads (query/fresh.py) read the commits after the current snapshot from the
    log, and restore and the quality gate read the changelog as of a snapshot's version (VACUUM keeps
    those versions' data files for the same reason, maintenance/vacuum.py).
`maintain_logs` runs from a continuous run's own thread beside the stream (at most once a minute:
the cutoff moves by the minute), when a run stops, and after compaction and cleanup; it writes the
changelog's and the intake's Delta checkpoints first when one is due (changelog/checkpoints.py), since a cleanup only
deletes what a checkpoint makes unnecessary.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from deltastate.changelog.audit_log import copied_through
from deltastate.changelog.checkpoints import checkpoint_quietly
from deltastate.changelog.layout import CHANGELOG, INTAKE
from deltastate.changelog.log_cleanup import DEFAULT_RETENTION, RETENTION_PROPERTY, clean_log
from deltastate.changelog.tables import table_exists, table_properties
from deltastate.config import Settings
from deltastate.errors import SnapshotError
from deltastate.maintenance.vacuum import parse_interval_hours
from deltastate.snapshot.catalog import list_snapshots
from deltastate.stores.definition import StoreDefinition

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

CLEAN_EVERY_S = 60.0  # the cutoff moves by the minute: cleaning more often deletes nothing more

_last_cleaned: dict[str, float] = {}  # changelog path -> monotonic time of its last cleanup in this process


@dataclass(frozen=True)
class KeptVersions:
    """The oldest version of each table a reader still needs (None: no reader bound)."""

    changelog: int | None
    intake: int | None


def kept_versions(spark: SparkSession, settings: Settings, store: StoreDefinition) -> KeptVersions:
    """The commits a cleanup must keep: the changelog's from the first whose audit is not copied yet,
    and both tables' from the oldest version a retained snapshot was built from."""
    changelog: list[int] = [copied_through(spark, settings.table_path(store.storage, INTAKE)) + 1]
    intake: list[int] = []
    try:
        snapshots = list_snapshots(settings)
    except SnapshotError:  # an unreadable snapshot: keep what any snapshot could need
        snapshots = None
        changelog.append(0)
    for held in (s for info in snapshots or () for s in info.stores if s.store == store.name):
        if held.changelog_version is not None:
            changelog.append(held.changelog_version)
        if held.intake_version is not None:
            intake.append(held.intake_version)
    return KeptVersions(min(changelog), min(intake, default=None))


def retention_ms(spark: SparkSession, path: str) -> int:
    """The table's log retention in milliseconds: its RETENTION_PROPERTY, DEFAULT_RETENTION when it
    has none or one that does not read as an interval (said in the log)."""
    text = table_properties(spark, path).get(RETENTION_PROPERTY)
    hours = parse_interval_hours(text) if text else None
    if hours is None:
        if text:
            log.warning("%s: %s = %r is not an interval such as 'interval 6 hours'; cleaning its log with %r",
                        path, RETENTION_PROPERTY, text, DEFAULT_RETENTION)
        hours = parse_interval_hours(DEFAULT_RETENTION)
    return int(hours * 3_600_000)


def maintain_logs(spark: SparkSession, settings: Settings, store: StoreDefinition, clean_now: bool = False) -> None:
    """Each table's checkpoint when one is due, then both logs' cleanup when a minute has passed
    since the last one here (or clean_now). Neither decides any work's outcome: a failure is logged
    and the next call tries again."""
    changelog, intake = (settings.table_path(store.storage, t) for t in (CHANGELOG, INTAKE))
    checkpoint_quietly(spark, changelog)
    checkpoint_quietly(spark, intake)
    now = time.monotonic()
    if not clean_now and now - _last_cleaned.get(changelog, float("-inf")) < CLEAN_EVERY_S:
        return
    _last_cleaned[changelog] = now
    try:
        kept = kept_versions(spark, settings, store)
        for path, keep_from in ((changelog, kept.changelog), (intake, kept.intake)):
            if table_exists(spark, path):
                clean_log(spark, path, retention_ms(spark, path), keep_from)
    except Exception:  # noqa: BLE001 - retried at the next call; the tables are whole without it
        log.warning("cleaning the Delta logs of store %s failed; the next check retries", store.name, exc_info=True)


__all__ = ["CLEAN_EVERY_S", "KeptVersions", "kept_versions", "maintain_logs", "retention_ms"]
