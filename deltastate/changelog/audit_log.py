"""A micro-batch's audit rides in its changelog commit; the intake table keeps the audit history.

A batch of a store with a changelog lands in one Delta commit: its changelog records, and its audit
row as the commit's `userMetadata` (JSON under AUDIT_KEY). Records and audit cannot be separated by a
crash, and the batch pays one commit instead of two. A batch that changed no key still commits, with
no rows, to carry its audit.

The intake table stays the audit's queryable history: `flush_audits` copies the audits of changelog
commits into it, each lineage's rows in one idempotent append (txnAppId = the lineage's intake app
id, txnVersion = its newest batch), so a copy repeated after a crash, or by two processes at once,
lands once. Every copy's last commit records the changelog version it covers and each lineage's
newest batch copied (its marker), with its rows, so a crash cannot separate rows and marker.

The engine flushes when a run starts and when it stops, and restore flushes before it reads the
audit. While a run goes on, its own thread copies every `DELTASTATE_AUDIT_FLUSH_SECONDS` as plain
appends: the run holds the store's writer lock, so no other copy races it, and the marker says where
the next copy resumes. A plain append reads nothing of the table (the idempotent one reads the txn
versions from the snapshot's checksum, or rebuilds the table's state without one), but it does not
move the lineage's txn version, which the run-start readers use (the ledger, the replay check, the
checkpoint check); so every flush first brings the txn versions up to the newest marker's batches,
with an empty idempotent append when they lag. Readers that only follow the history (store pages, metrics, retention) see it up to
one copy interval late, which moves nothing they answer past what the changelog holds: a later
stream time only ever retains less.

commitInfo is not kept in Delta checkpoints, and a commit file leaves the log when the log is
cleaned: the intake copy is what makes the audit permanent, and the cleanup never takes a commit
whose audit is not copied yet (maintenance/log_retention.py asks `copied_through`).
"""

from __future__ import annotations

import itertools
import json
import logging
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from deltastate.changelog.deltalog import commit_metadata, local_dir, user_metadata_newest_first
from deltastate.changelog.layout import (
    APPLIED,
    BATCH_ID,
    CHANGELOG,
    DEAD_LETTERED,
    INTAKE,
    INTAKE_COLUMNS,
    LATE,
    LINEAGE_ID,
    OFFSETS,
    PARTITION_COUNTS,
    RECORDS_IN,
    STREAM_TIMES,
    TOMBSTONES,
    TOTALS_BEFORE,
    WRITE_TIME,
)
from deltastate.changelog.reader import changelog_version
from deltastate.changelog.tables import append_once
from deltastate.changelog.txn_log import txn_versions
from deltastate.config import Settings
from deltastate.stores.definition import StoreDefinition

log = logging.getLogger(__name__)

AUDIT_KEY = "deltastate.audit"  # a changelog commit's userMetadata: {AUDIT_KEY: {app_id, row}}
# A copy's marker, an intake commit's userMetadata: {FLUSH_KEY: changelog version, BATCHES_KEY:
# {intake app id: newest batch copied}} (markers written before BATCHES_KEY have only FLUSH_KEY).
FLUSH_KEY = "deltastate.copied_through"
BATCHES_KEY = "deltastate.copied_batches"
_ROW_COLUMNS = tuple(name for name, _ in INTAKE_COLUMNS if name != WRITE_TIME)
_SCHEMA = ", ".join(f"{name} {type_}" for name, type_ in INTAKE_COLUMNS if name != WRITE_TIME)
_MARKER_SEARCH = 50  # intake commits searched, newest first, for the last flush marker
_RACE_SLACK = 100  # commits a concurrent writer may add while a flush reads the changelog's history


@dataclass(frozen=True)
class BatchAudit:
    """One batch's audit row (layout.INTAKE_COLUMNS but write_time) and the intake app id it lands under."""

    app_id: str
    row: dict[str, Any]

    def metadata(self) -> str:
        return json.dumps({AUDIT_KEY: {"app_id": self.app_id, "row": self.row}}, sort_keys=True)

    @classmethod
    def from_metadata(cls, text: str | None) -> BatchAudit | None:
        """The audit a commit's userMetadata carries; None for any other metadata."""
        if not text or AUDIT_KEY not in text:
            return None
        try:
            found = json.loads(text)[AUDIT_KEY]
            return cls(str(found["app_id"]), {c: found["row"].get(c) for c in _ROW_COLUMNS})
        except (ValueError, TypeError, KeyError, AttributeError):
            return None


def audit_record(lineage_id: str, batch_id: int, counts: dict[int, tuple[int, int, int, int]],
                 offsets: dict[int, tuple[int, int]], stream_times: dict[int, int], totals_before: str,
                 late: int = 0) -> dict[str, Any]:
    """One batch's audit row. counts: partition -> (records_in, applied, dead_lettered, tombstones);
    offsets: partition -> (lo, hi) covered; stream_times: partition -> newest applied event time;
    totals_before: JSON of what the writer carried into the batch (layout.INTAKE_COLUMNS)."""
    records_in, applied, dead, tombstones = (sum(c[i] for c in counts.values()) for i in range(4))
    return {LINEAGE_ID: lineage_id, BATCH_ID: batch_id, RECORDS_IN: records_in, APPLIED: applied,
            DEAD_LETTERED: dead, TOMBSTONES: tombstones, OFFSETS: by_partition(offsets), LATE: late,
            STREAM_TIMES: by_partition(stream_times), PARTITION_COUNTS: by_partition(counts),
            TOTALS_BEFORE: totals_before}


def by_partition(values: dict) -> str:
    """JSON {partition: value} as the audit table holds it (tuples as lists, partitions in order)."""
    return json.dumps({str(p): list(v) if isinstance(v, tuple) else v for p, v in sorted(values.items())})


def audit_rows(spark: SparkSession, rows: list[dict[str, Any]], written: list[datetime] | None = None) -> DataFrame:
    """Audit rows as a DataFrame in the intake table's column order; write_time is each row's commit
    time when given, else now. The times travel in the rows themselves: a local frame, no join."""
    if written is None:
        frame = spark.createDataFrame([tuple(r[c] for c in _ROW_COLUMNS) for r in rows], _SCHEMA)
        frame = frame.withColumn(WRITE_TIME, F.current_timestamp())
    else:
        frame = spark.createDataFrame([(*(r[c] for c in _ROW_COLUMNS), at) for r, at in zip(rows, written, strict=True)],
                                      f"{_SCHEMA}, {WRITE_TIME} timestamp")
    # One partition: a copy is one task and one file, not one per default partition (most of them empty).
    return frame.select(*[n for n, _ in INTAKE_COLUMNS]).coalesce(1)


def append_audit(df: DataFrame, path: str, app_id: str, batch_id: int, metadata: str | None = None) -> None:
    """An idempotent intake append (txnAppId/txnVersion); older tables gain newer columns."""
    append_once(df, path, app_id, batch_id, merge_schema=True, metadata=metadata)


def copied_through(spark: SparkSession, intake: str) -> int:
    """The changelog version the intake's newest audit copy covers (-1: none found)."""
    return _newest_marker(spark, intake)[0]


def _newest_marker(spark: SparkSession, intake: str) -> tuple[int, dict[str, int]]:
    """The newest copy marker: (changelog version covered, intake app id -> newest batch copied);
    (-1, {}) when none is found."""
    from delta.tables import DeltaTable

    if local_dir(intake) is not None:  # the local log's commit files, no Spark job
        found = itertools.islice(user_metadata_newest_first(intake), _MARKER_SEARCH)
    else:
        found = (row["userMetadata"] for row in
                 DeltaTable.forPath(spark, intake).history(_MARKER_SEARCH).select("userMetadata").collect())
    for text in found:
        if text and FLUSH_KEY in text:
            try:
                marker = json.loads(text)
                return int(marker[FLUSH_KEY]), {str(a): int(b) for a, b in marker.get(BATCHES_KEY, {}).items()}
            except (ValueError, TypeError, KeyError, AttributeError):
                continue
    return -1, {}


def pending_audits(spark: SparkSession, changelog: str, since: int) -> tuple[int, list[tuple[BatchAudit, datetime]]]:
    """(newest changelog version, the audits of its commits after `since` with their commit times)."""
    from delta.tables import DeltaTable

    local = local_dir(changelog) is not None
    newest = changelog_version(spark, changelog)
    if newest is None or newest <= since:
        return -1 if newest is None else newest, []
    if local:  # the local log's commit files, no Spark job
        commits = commit_metadata(changelog, since + 1, newest)
    else:
        # Commits landing meanwhile are newer than `newest`: the slack keeps since+1..newest in the window.
        rows = (DeltaTable.forPath(spark, changelog).history(newest - since + _RACE_SLACK)
                .select("version", "timestamp", "userMetadata").collect())
        commits = [(r["version"], r["timestamp"], r["userMetadata"]) for r in rows]
    found = []
    for version, at, metadata in sorted(commits, key=lambda c: c[0]):
        audit = BatchAudit.from_metadata(metadata)
        if audit is not None and since < version <= newest:
            found.append((audit, at))
    return newest, found


def flush_audits(spark: SparkSession, settings: Settings, store: StoreDefinition, attempts: int = 3) -> int:
    """Copies the audits of changelog commits into the intake table; returns how many rows it found to
    copy (a copy running at the same time may land some of them instead: each lands once)."""
    from delta.exceptions import ConcurrentTransactionException

    from deltastate.changelog.tables import table_exists

    changelog, intake = (settings.table_path(store.storage, t) for t in (CHANGELOG, INTAKE))
    if not (table_exists(spark, changelog) and table_exists(spark, intake)):
        return 0
    for attempt in range(attempts):
        try:
            return _flush_once(spark, changelog, intake)
        except ConcurrentTransactionException:
            if attempt == attempts - 1:
                raise
            time.sleep(0.2)  # another process flushed the same lineage: read what it copied, then go on
    return 0


def _flush_once(spark: SparkSession, changelog: str, intake: str) -> int:
    through, plainly_copied = _newest_marker(spark, intake)
    newest, found = pending_audits(spark, changelog, through)
    held = txn_versions(spark, intake) if found or plainly_copied else {}
    if held is None and found:  # txn entries may expire: what the table holds is the answer
        present = {(r[LINEAGE_ID], int(r[BATCH_ID])) for r in
                   spark.read.format("delta").load(intake).select(LINEAGE_ID, BATCH_ID).collect()}

    def copied(audit: BatchAudit) -> bool:
        batch = int(audit.row[BATCH_ID])
        return ((audit.row[LINEAGE_ID], batch) in present if held is None
                else batch <= held.get(audit.app_id, -1))

    missing = [(a, at) for a, at in found if not copied(a)]
    appending = {a.app_id for a, _ in missing}  # their idempotent appends move their txn versions
    _settle_txn_versions(spark, intake, {app: b for app, b in plainly_copied.items() if app not in appending}, held)
    return append_copies(spark, intake, missing, newest) if missing else 0


def _settle_txn_versions(spark: SparkSession, intake: str, copied: dict[str, int],
                         held: dict[str, int] | None) -> None:
    """Brings each lineage's intake txn version (held: the current ones) up to the newest batch a
    plain copy landed, with an empty idempotent append: a commit that only records the version."""
    if held is None:  # txn entries that may expire: their readers scan the rows instead (txn_log)
        return
    for app_id, batch in sorted(copied.items()):
        if held.get(app_id, -1) < batch:
            append_audit(audit_rows(spark, []), intake, app_id, batch)


def append_copies(spark: SparkSession, intake: str, audits: list[tuple[BatchAudit, datetime]],
                   through_version: int, idempotent: bool = True) -> int:
    """One intake append per lineage, the last one carrying the copy's marker (the changelog version
    the copy covers, each lineage's newest batch): a crash between two appends leaves the marker
    where it was, and the next copy finds the first lineage's rows by their txn version. idempotent:
    txnVersion = the lineage's newest batch (a plain append only for a run's own copies, one
    lineage, under its writer lock). Returns the rows appended."""
    by_app: dict[str, list[tuple[BatchAudit, datetime]]] = {}
    for audit, at in audits:
        by_app.setdefault(audit.app_id, []).append((audit, at))
    newest = {app_id: max(int(a.row[BATCH_ID]) for a, _ in own) for app_id, own in by_app.items()}
    marker = json.dumps({FLUSH_KEY: through_version, BATCHES_KEY: newest}, sort_keys=True)
    apps = sorted(by_app)
    for app_id in apps:
        own = sorted(by_app[app_id], key=lambda a: int(a[0].row[BATCH_ID]))
        rows = audit_rows(spark, [a.row for a, _ in own], [at for _, at in own])
        if idempotent:
            append_audit(rows, intake, app_id, newest[app_id], marker if app_id == apps[-1] else None)
        else:
            rows.write.format("delta").mode("append").option("mergeSchema", "true") \
                .option("userMetadata", marker).save(intake)
    return len(audits)
