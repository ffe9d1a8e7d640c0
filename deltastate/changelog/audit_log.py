"""A micro-batch's audit rides in its changelog commit; the intake table keeps the audit history.

A batch of a store with a changelog lands in one Delta commit: its changelog records, and its audit
row as the commit's `userMetadata` (JSON under AUDIT_KEY). Records and audit cannot be separated by a
crash, and the batch pays one commit instead of two. A batch that changed no key still commits, with
no rows, to carry its audit.

The intake table stays the audit's queryable history: `flush_audits` copies the audits of changelog
commits into it, each lineage's rows in one idempotent append (txnAppId = the lineage's intake app
id, txnVersion = its newest batch), so a copy repeated after a crash, or by two processes at once,
lands once. The engine flushes when a run starts, every `DELTASTATE_AUDIT_FLUSH_SECONDS` while it
runs, and when it stops; restore flushes before it reads the audit. Readers that only follow the
history (store pages, metrics, retention) see it up to one flush interval late, which moves nothing
they answer past what the changelog holds: a later stream time only ever retains less.

commitInfo is not kept in Delta checkpoints, and JSON commits leave the log after
`delta.logRetentionDuration` (30 days): the intake copy is what makes the audit permanent, and a
flush at every run start keeps the gap far inside that.
"""

from __future__ import annotations

import itertools
import json
import logging
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pyspark.sql import Column, DataFrame, Observation, SparkSession
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
from deltastate.changelog.txn_log import txn_versions
from deltastate.config import Settings
from deltastate.stores.definition import StoreDefinition

log = logging.getLogger(__name__)

AUDIT_KEY = "deltastate.audit"  # a changelog commit's userMetadata: {AUDIT_KEY: {app_id, row}}
FLUSH_KEY = "deltastate.copied_through"  # an intake commit's userMetadata: {FLUSH_KEY: changelog version}
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
    return frame.select(*[n for n, _ in INTAKE_COLUMNS])


def append_audit(df: DataFrame, path: str, app_id: str, batch_id: int, metadata: str | None = None) -> None:
    """An idempotent intake append (txnAppId/txnVersion); older tables gain newer columns."""
    writer = (df.write.format("delta").mode("append").option("txnAppId", app_id).option("txnVersion", batch_id)
              .option("mergeSchema", "true"))
    if metadata is not None:
        writer = writer.option("userMetadata", metadata)
    writer.save(path)


def copied_through(spark: SparkSession, intake: str) -> int:
    """The changelog version the intake's newest audit copy covers (-1: none found)."""
    from delta.tables import DeltaTable

    if local_dir(intake) is not None:  # the local log's commit files, no Spark job
        found = itertools.islice(user_metadata_newest_first(intake), _MARKER_SEARCH)
    else:
        found = (row["userMetadata"] for row in
                 DeltaTable.forPath(spark, intake).history(_MARKER_SEARCH).select("userMetadata").collect())
    for text in found:
        if text and FLUSH_KEY in text:
            try:
                return int(json.loads(text)[FLUSH_KEY])
            except (ValueError, TypeError, KeyError):
                continue
    return -1


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
    newest, found = pending_audits(spark, changelog, copied_through(spark, intake))
    if not found:
        return 0
    held = txn_versions(spark, intake)
    if held is None:  # txn entries may expire: what the table holds is the answer
        present = {(r[LINEAGE_ID], int(r[BATCH_ID])) for r in
                   spark.read.format("delta").load(intake).select(LINEAGE_ID, BATCH_ID).collect()}

    def copied(audit: BatchAudit) -> bool:
        batch = int(audit.row[BATCH_ID])
        return ((audit.row[LINEAGE_ID], batch) in present if held is None
                else batch <= held.get(audit.app_id, -1))

    return _append_copies(spark, intake, [(a, at) for a, at in found if not copied(a)], newest)


def _append_copies(spark: SparkSession, intake: str, audits: list[tuple[BatchAudit, datetime]],
                   through_version: int) -> int:
    """One idempotent intake append per lineage (txnVersion = its newest batch), each recording the
    changelog version the copy covers; returns the rows appended."""
    by_app: dict[str, list[tuple[BatchAudit, datetime]]] = {}
    for audit, at in audits:
        by_app.setdefault(audit.app_id, []).append((audit, at))
    marker = json.dumps({FLUSH_KEY: through_version})
    for app_id, own in sorted(by_app.items()):
        own.sort(key=lambda a: int(a[0].row[BATCH_ID]))
        rows = [a.row for a, _ in own]
        append_audit(audit_rows(spark, rows, [at for _, at in own]), intake, app_id, int(rows[-1][BATCH_ID]), marker)
    return len(audits)


class BatchCommitter:
    """A running store's batch commits (one per micro-batch) and the copies of their audits.

    Spark replays a micro-batch only in a new run, as the run's first batch; so only the first batch
    asks the log whether it already landed, through Delta's idempotent-write check
    (txnAppId/txnVersion), which reconstructs the table's state. Every later batch of the run is a
    plain append: the same commit without that reconstruction. The run's own thread copies the
    audits committed so far to the intake table every `DELTASTATE_AUDIT_FLUSH_SECONDS`, beside the
    stream rather than inside a batch, and an idle store's too; each copy records the changelog
    version it covers, where the next run's start resumes copying."""

    def __init__(self, settings: Settings, store: StoreDefinition, changelog_app_id: str) -> None:
        self.changelog, self.intake = (settings.table_path(store.storage, t) for t in (CHANGELOG, INTAKE))
        self.changelog_app_id = changelog_app_id
        self.every = settings.audit_flush_seconds
        self._first = True
        self._pending: list[tuple[BatchAudit, datetime]] = []
        self._lock = threading.Lock()  # the batch thread adds audits while the run's thread copies
        self._last_copy = time.monotonic()

    def commit(self, records: DataFrame, batch_id: int, audit: BatchAudit,
               counts: dict[str, Column] | None = None) -> dict[str, int]:
        """The batch's records and audit in one changelog commit; returns the named counts over the
        records (count_if columns, say), observed while they are written."""
        spark = records.sparkSession
        first, self._first = self._first, False
        if first and self._landed(spark, batch_id, audit):
            row = records.agg(*[c.alias(n) for n, c in counts.items()]).first() if counts else None
            return {n: int(row[n]) for n in counts} if counts else {}
        observed = Observation(f"commit_{uuid.uuid4().hex}") if counts else None
        rows = records.observe(observed, *[c.alias(n) for n, c in counts.items()]) if counts else records
        writer = rows.write.format("delta").mode("append").option("userMetadata", audit.metadata())
        if first:
            writer = writer.option("txnAppId", self.changelog_app_id).option("txnVersion", batch_id)
        writer.save(self.changelog)
        with self._lock:
            self._pending.append((audit, datetime.now()))
        return {n: int(v) for n, v in observed.get.items()} if observed else {}

    def _landed(self, spark: SparkSession, batch_id: int, audit: BatchAudit) -> bool:
        """Whether a replayed batch is in place already. The run's start copied every committed
        audit, so the intake table knows a batch committed with its audit; a changelog whose records
        landed without their audit (written by two commits per batch) gets the audit row now."""
        if (txn_versions(spark, self.intake) or {}).get(audit.app_id, -1) >= batch_id:
            return True
        held = txn_versions(spark, self.changelog)
        if held is not None and held.get(self.changelog_app_id, -1) >= batch_id:
            append_audit(audit_rows(spark, [audit.row]), self.intake, audit.app_id, batch_id)
            return True
        return False

    def maybe_copy(self, spark: SparkSession) -> None:
        """A copy when one is due; a failed copy is logged and retried at the next (the audits stay
        in the changelog's commits, and the run's stop copies them or fails)."""
        if time.monotonic() - self._last_copy < self.every:
            return
        self._last_copy = time.monotonic()
        try:
            self.copy(spark)
        except Exception:  # noqa: BLE001 - retried; the stop's copy raises
            log.warning("copying audits to %s failed; retrying in %.0f s", self.intake, self.every, exc_info=True)

    def copy(self, spark: SparkSession) -> None:
        """Appends the audits committed since the last copy to the intake table (idempotent)."""
        with self._lock:
            taken = list(self._pending)
        if not taken:
            return
        # Every audit at or below this version is taken or copied: this run is the store's one writer.
        version = changelog_version(spark, self.changelog)
        if version is None:  # taken audits come from this changelog's commits, so it has some
            raise RuntimeError(f"{self.changelog}: audits to copy, but no changelog commit")
        _append_copies(spark, self.intake, taken, version)
        with self._lock:
            del self._pending[:len(taken)]
