"""A running store's micro-batch commits: one Delta commit per batch, its records with its audit
(changelog/audit_log.py), and the run's own copies of those audits to the intake table."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

from deltastate.changelog.audit_log import BatchAudit, append_audit, append_copies, audit_rows
from deltastate.changelog.deltalog import local_dir
from deltastate.changelog.layout import BATCH_ID, CHANGELOG, INTAKE, LINEAGE_ID
from deltastate.changelog.reader import changelog_version
from deltastate.changelog.tables import append_once
from deltastate.changelog.txn_log import txn_versions
from deltastate.config import Settings
from deltastate.stores.definition import StoreDefinition

log = logging.getLogger(__name__)

# Changelog records per data file a batch writes at most: a running store's batch writes one file per
# shuffle partition it touched, a backlog's batch more once a partition's records pass this.
RECORDS_PER_FILE = 500_000


@dataclass(frozen=True)
class StagedAppend:
    """A batch's changelog files, written and not yet committed (io.deltastate.BatchAppend)."""

    batch_id: int
    append: Any  # the JVM BatchAppend holding the open transaction and its files
    idempotent: bool  # commits with the changelog's txn version (a run's first batch)


class BatchCommitter:
    """A running store's batch commits (one per micro-batch) and the copies of their audits.

    Spark replays a micro-batch only in a new run, as the run's first batch; so only the first batch
    asks the log whether it already landed, through its idempotent commit (txnAppId/txnVersion:
    changelog/tables.py append_once). Every later batch of the run is a plain append: the same
    commit without that check. A batch's dead letters, appended before its commit, follow the same
    rule: the first batch looks for its rows, later ones append. The run's own thread copies the
    audits committed so far to the intake table every `DELTASTATE_AUDIT_FLUSH_SECONDS`, beside the
    stream rather than inside a batch, and an idle store's too, as plain appends (the module
    docstring says why that is safe); each copy records the changelog version it covers, where the
    next copy resumes."""

    def __init__(self, settings: Settings, store: StoreDefinition, changelog_app_id: str) -> None:
        self.changelog, self.intake = (settings.table_path(store.storage, t) for t in (CHANGELOG, INTAKE))
        self.changelog_app_id = changelog_app_id
        self.every = settings.audit_flush_seconds
        self._first_batch: int | None = None
        # (audit, commit time, a changelog version at or after its commit), in batch order
        self._pending: list[tuple[BatchAudit, datetime, int]] = []
        self._lock = threading.Lock()  # the batch thread adds audits while the run's thread copies
        self._last_copy = time.monotonic()

    def commit(self, records: DataFrame, batch_id: int, audit: BatchAudit,
               counts: dict[str, Column] | None = None) -> dict[str, int]:
        """The batch's records and audit in one changelog commit; returns the named counts over the
        records (count_if columns, say), observed while they are written."""
        spark = records.sparkSession
        first = self._replayable(batch_id)
        if first and self._landed(spark, batch_id, audit):
            row = records.agg(*[c.alias(n) for n, c in counts.items()]).first() if counts else None
            return {n: int(row[n]) for n in counts} if counts else {}
        observed = Observation(f"commit_{uuid.uuid4().hex}") if counts else None
        rows = records.observe(observed, *[c.alias(n) for n, c in counts.items()]) if counts else records
        if first:
            append_once(rows, self.changelog, self.changelog_app_id, batch_id, metadata=audit.metadata())
        else:
            rows.write.format("delta").mode("append").option("userMetadata", audit.metadata()).save(self.changelog)
        landed = self._version_after_commit(spark)
        with self._lock:
            self._pending.append((audit, datetime.now(), landed))
        return {n: int(v) for n, v in observed.get.items()} if observed else {}

    def stage(self, records: DataFrame, batch_id: int, intake_app_id: str) -> StagedAppend | None:
        """Writes a batch's records as changelog data files in one Spark job, before its audit is
        known: the caller reads what it observed during that job (its counts), builds the audit, and
        `commit_staged` commits the files with it. So a batch runs one job and one commit, where
        `commit` needs the audit, and so a job computing it, first. None for a run's first batch
        that may have landed already (its intake audit or its changelog txn says so): `commit`
        handles that replay. A first batch that has not is staged to commit with its txn version."""
        spark = records.sparkSession
        if not self.stages(spark, batch_id, intake_app_id):
            return None
        jvm = spark._jvm
        txn = jvm.io.deltastate.BatchAppend.begin(spark._jsparkSession, self.changelog)
        return StagedAppend(batch_id, jvm.io.deltastate.BatchAppend.write(txn, records._jdf, RECORDS_PER_FILE),
                            idempotent=self._replayable(batch_id))

    def stages(self, spark: SparkSession, batch_id: int, intake_app_id: str) -> bool:
        """Whether `stage` writes the batch (else it returns None): every batch but a run's first
        one that may have landed already. A writer asks before planning what it would stage."""
        return not (self._replayable(batch_id) and self._may_have_landed(spark, batch_id, intake_app_id))

    def commit_staged(self, staged: StagedAppend, audit: BatchAudit) -> int:
        """Commits a staged batch's files with its audit; returns the changelog version it landed as.
        A run's first batch commits with its txn version (asked before staging, not again inside
        the transaction: the run holds the store's writer lock, so no other writer commits it)."""
        app_id = self.changelog_app_id if staged.idempotent else None
        landed = int(staged.append.commit(audit.metadata(), app_id, staged.batch_id))
        with self._lock:
            self._pending.append((audit, datetime.now(), landed))
        return landed

    @staticmethod
    def abandon(staged: StagedAppend) -> None:
        """Deletes a staged batch's files uncommitted, for a batch that stages its records again."""
        staged.append.abandon()

    def append_dead_letters(self, rows: DataFrame, path: str, lineage_id: str, batch_id: int) -> None:
        """The batch's dead letters, before its commit. A replayed batch whose dead letters landed
        before a crash took its commit finds them (by lineage and batch: the dead-letter table's txn
        version lags behind plain appends, so it cannot tell) and appends nothing."""
        if self._replayable(batch_id):
            landed = (rows.sparkSession.read.format("delta").load(path)
                      .where((F.col(LINEAGE_ID) == F.lit(lineage_id)) & (F.col(BATCH_ID) == F.lit(batch_id)))
                      .limit(1).count())
            if landed:
                return
        rows.write.format("delta").mode("append").save(path)

    def _replayable(self, batch_id: int) -> bool:
        """Whether the batch may be a replay: Spark replays only as a run's first batch."""
        if self._first_batch is None:
            self._first_batch = batch_id
        return batch_id == self._first_batch

    def _may_have_landed(self, spark: SparkSession, batch_id: int, intake_app_id: str) -> bool:
        return any((txn_versions(spark, path) or {}).get(app_id, -1) >= batch_id
                   for path, app_id in ((self.intake, intake_app_id), (self.changelog, self.changelog_app_id)))

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
        """Appends the audits committed since the last copy to the intake table (a plain append)."""
        with self._lock:
            taken = list(self._pending)
        if not taken:
            return
        # The copy covers the changelog through the version read after the last taken audit's commit,
        # not the newest one: a batch may have committed since without its audit taken yet (its
        # commit lands inside save(), its audit joins the pending list after). Only this run's
        # batches carry audits (it is the store's one writer), so no audit sits between its
        # commit and that version.
        append_copies(spark, self.intake, [(a, at) for a, at, _ in taken], taken[-1][2], idempotent=False)
        with self._lock:
            del self._pending[:len(taken)]

    def _version_after_commit(self, spark: SparkSession) -> int:
        """A changelog version at or after the commit that just landed."""
        version = changelog_version(spark, self.changelog) if local_dir(self.changelog) is not None else int(
            spark._jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, self.changelog)
            .unsafeVolatileSnapshot().version())
        if version is None or version < 0:  # the commit just landed, so there is one
            raise RuntimeError(f"{self.changelog}: a batch committed, but no changelog version is found")
        return version
