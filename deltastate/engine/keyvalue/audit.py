"""The intake audit of a key-value store, from running totals the stream keeps in its own state.

A key-value store runs one streaming query, so each record is parsed and classified once. Every
record feeds two groups of one native streaming aggregation: its key's fold and its source
partition's audit group. An audit group keeps running totals: records in, applied, dead-lettered,
tombstones, the offset range and the newest event time. A micro-batch's audit row is the difference
between the totals after it and the totals after the lineage's previous batch; the audit table
holds those in each row's per-partition counts (`partition_counts`), and the totals the batch
started from (`totals_before`), so a run resumes from its lineage's newest row alone.

Dead letters are rare, and their raw bytes are not worth keeping in state. Only a batch whose
dead-letter count grew reads its offset range again from Kafka, classifies it with the same
expressions, and writes the records that fail. The count must match, or the batch fails.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from deltastate.changelog.intake import carried_counts_json, lineage_audits, newest_lineage_audit
from deltastate.changelog.layout import INTAKE
from deltastate.changelog.txn_log import UnknownFromLog
from deltastate.config import Settings
from deltastate.engine.common.lineage import Lineage
from deltastate.engine.common.output import COUNTS
from deltastate.errors import AuditMismatchError
from deltastate.stores.definition import StoreDefinition


@dataclass(frozen=True)
class RunningTotals:
    """One partition's audit group after a micro-batch (totals since the lineage began)."""

    counts: tuple[int, int, int, int]  # in COUNTS order
    lo: int  # the lowest offset the lineage read
    hi: int  # the highest
    stream_time: int | None  # newest event time of an applied put, epoch ms


@dataclass
class Ledger:
    """What the audit table holds for a lineage before a batch: per-partition count sums and the
    highest offset read. next_batch is the batch these totals are valid for; audited says that
    batch's own audit row already landed (a replay after a crash between it and Spark's commit),
    so its dead letters and audit row are in place and Kafka need not be read again."""

    next_batch: int
    counts: dict[int, tuple[int, int, int, int]] = field(default_factory=dict)
    hi: dict[int, int] = field(default_factory=dict)
    audited: bool = False


@dataclass(frozen=True)
class BatchCounts:
    """One micro-batch's audit: per partition, its counts and the offset range it covered."""

    counts: dict[int, tuple[int, int, int, int]]
    offsets: dict[int, tuple[int, int]]
    stream_times: dict[int, int]

    def total(self, name: str) -> int:
        i = COUNTS.index(name)
        return sum(c[i] for c in self.counts.values())

    def with_dead_letters(self) -> dict[int, tuple[int, int]]:
        return {p: self.offsets[p] for p, c in self.counts.items() if c[2] > 0}


def batch_audit(ledger: Ledger, running: dict[int, RunningTotals], store: str, batch_id: int) -> BatchCounts:
    """The batch's audit: running totals minus what earlier batches of the lineage recorded."""
    counts, offsets, times = {}, {}, {}
    for p, totals in sorted(running.items()):
        before = ledger.counts.get(p, (0, 0, 0, 0))
        delta = tuple(now - was for now, was in zip(totals.counts, before, strict=True))
        if any(d < 0 for d in delta) or delta[0] != delta[1] + delta[2]:
            raise AuditMismatchError(
                f"store {store!r}, batch {batch_id}, partition {p}: the stream's running totals {totals.counts} "
                f"disagree with the audit table's {before}; the checkpoint does not belong to these tables: "
                f"rebuild it with `deltastate restore {store}`")
        if delta[0] == 0:
            continue
        counts[p] = delta
        offsets[p] = (ledger.hi[p] + 1 if p in ledger.hi else totals.lo, totals.hi)
        if totals.stream_time is not None:
            times[p] = totals.stream_time
    return BatchCounts(counts, offsets, times)


def advance(ledger: Ledger, audit: BatchCounts, batch_id: int) -> Ledger:
    counts = dict(ledger.counts)
    for p, delta in audit.counts.items():
        was = counts.get(p, (0, 0, 0, 0))
        counts[p] = tuple(a + b for a, b in zip(was, delta, strict=True))
    return Ledger(batch_id + 1, counts, {**ledger.hi, **{p: hi for p, (_, hi) in audit.offsets.items()}})


def ledger_json(ledger: Ledger) -> str:
    """The ledger a batch starts from, as its audit row's totals_before."""
    return carried_counts_json(ledger.counts, ledger.hi)


def load_ledger(spark: SparkSession, settings: Settings, store: StoreDefinition, lineage: Lineage,
                before_batch: int) -> Ledger:
    """The lineage's audit totals before before_batch (a replayed batch sees what it first saw).

    Read from the lineage's newest audit row, which carries the totals before it (totals_before):
    the log names that row's batch (txn_log), so a run's start costs one row, not the lineage's
    history. A replay of that very batch takes its totals_before and is marked audited. Tables that
    cannot answer so (older rows without totals_before, expiring txn entries) are summed instead."""
    try:
        newest = newest_lineage_audit(spark, settings, store, lineage.app_id(INTAKE), lineage.lineage_id)
    except UnknownFromLog:
        return scan_ledger(spark, settings, store, lineage, before_batch)
    if newest is None:
        return Ledger(before_batch)
    if newest.carried is None or newest.batch_id > before_batch:
        return scan_ledger(spark, settings, store, lineage, before_batch)
    ledger = Ledger(before_batch, dict(newest.carried.counts), dict(newest.carried.hi))
    if newest.batch_id == before_batch:  # a replay of the lineage's newest audited batch
        ledger.audited = True
        return ledger
    own = BatchCounts(dict(newest.counts or {}), dict(newest.offsets), {})
    return advance(ledger, own, before_batch - 1)


def scan_ledger(spark: SparkSession, settings: Settings, store: StoreDefinition, lineage: Lineage,
                before_batch: int) -> Ledger:
    """load_ledger by summing every audit row of the lineage before before_batch."""
    ledger = Ledger(before_batch)
    for row in lineage_audits(spark, settings, store, lineage.lineage_id, before_batch):
        if row.batch_id == before_batch:
            ledger.audited = True
            continue
        if row.counts is None:
            raise AuditMismatchError(f"store {store.name!r}: audit row of batch {row.batch_id} of lineage "
                                     f"{lineage.lineage_id} has no partition counts")
        for p, delta in row.counts.items():
            was = ledger.counts.get(p, (0, 0, 0, 0))
            ledger.counts[p] = tuple(a + b for a, b in zip(was, delta, strict=True))
        for p, (_, hi) in row.offsets.items():
            ledger.hi[p] = max(ledger.hi.get(p, hi), hi)
    return ledger


@contextmanager
def reread_dead_letters(spark: SparkSession, settings: Settings, store: StoreDefinition, topic: str,
                        ranges: dict[int, tuple[int, int]]) -> Iterator[DataFrame]:
    """The classified records of the given offset ranges (inclusive) that failed, read from Kafka.

    The classified records are cached before the filter, and the cache is the point: Spark pushes a
    filter on `reason` below the projections that compute it, inlining every alias the reason
    reads, which repeats the JSON parses hundreds of times per record (721 `from_json` calls in the
    optimized plan of trade_stats' four fields). A cached relation is a leaf to the optimizer, so each
    record is parsed once."""
    from deltastate.engine.common.source import CONSUMER_OPTIONS
    from deltastate.ingest.decode import classify

    start = json.dumps({topic: {str(p): lo for p, (lo, _) in ranges.items()}})
    end = json.dumps({topic: {str(p): hi + 1 for p, (_, hi) in ranges.items()}})
    records = (spark.read.format("kafka")
               .option("kafka.bootstrap.servers", settings.kafka_bootstrap)
               .option("assign", json.dumps({topic: sorted(ranges)}))
               .option("startingOffsets", start).option("endingOffsets", end)
               .option("failOnDataLoss", "true").options(**CONSUMER_OPTIONS).load())
    classified = classify(records, store, settings.max_value_bytes).persist()
    try:
        yield classified.where(F.col("reason").isNotNull())
    finally:
        classified.unpersist()
