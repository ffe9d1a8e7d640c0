"""A store run's metrics, fed from the engine's batch reports and Spark's progress events.

Each batch report is handled off the query's thread (a single worker keeps them in order): the
batch's audit (carried by the report) and new dead letters give the per-partition counts, positions
and event times,
the broker gives the end offsets and the produce time of the newest record read. Progress events
give the trigger phases, the state store's size and RocksDB's figures. A continuous run refreshes
the lag every few seconds, so it falls to 0 once the store has caught up even with no new batch.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

from deltastate.changelog import layout
from deltastate.config import Settings
from deltastate.engine.common.lineage import Lineage
from deltastate.engine.common.report import BatchReport
from deltastate.metrics import names as m
from deltastate.metrics.audit_tail import TailFollower, dead_letter_counts, partition_batches
from deltastate.metrics.positions import TopicPositions, lag
from deltastate.metrics.progress import COMMIT_PHASES, IO_BYTES, Figures, hit_ratio, mean_latency_s
from deltastate.stores.definition import StoreDefinition

log = logging.getLogger(__name__)
LAG_REFRESH_S = 2.0
ALL = "all"  # the partition label of totals when the tables cannot be followed per partition


class StoreExporter:
    def __init__(self, settings: Settings, store: StoreDefinition, lineage: Lineage, topic: str,
                 memtable_bytes: Callable[[], int] | None = None) -> None:
        self.store, self.lineage, self.topic = store, lineage, topic
        # Spark's progress does not report RocksDB's memtables alone; this asks the JVM (-1: no figure).
        self.memtable_bytes = memtable_bytes
        self.run = (store.name, str(store.value_version))
        self.dead = TailFollower(settings.table_path(store.storage, layout.DEADLETTER),
                                 [layout.LINEAGE_ID, "partition", "reason"])
        self.positions = TopicPositions(settings.kafka_bootstrap, topic)
        self.committed: dict[int, int] = {}  # partition -> next offset to read
        self._lock = threading.Lock()
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"metrics-{store.name}")
        self._stop = threading.Event()
        self._refresher: threading.Thread | None = None
        self.after_batch: list = []  # callables run after each batch's figures are in (a push)

    def part(self, partition: int | str) -> tuple[str, str, str]:
        return (self.run[0], str(partition), self.run[1])

    # -- batch reports ------------------------------------------------------------------------
    def on_batch(self, report: BatchReport) -> None:
        self._worker.submit(self.guarded, self.record_batch, report)

    def guarded(self, fn, *args) -> None:
        try:
            fn(*args)
        except Exception:  # metrics never stop a store
            log.exception("store %s: metrics update failed", self.store.name)

    def record_batch(self, report: BatchReport) -> None:
        m.COMMITS.labels(*self.run).inc()
        for op, n in report.changelog.items():
            m.CHANGELOG_WRITTEN.labels(*self.run, op).inc(n)
        for phase, seconds in report.phases.items():
            m.BATCH_PHASE.labels(*self.run, phase).observe(seconds)
        m.BATCH_SECONDS.labels(*self.run).observe(sum(report.phases.values()))
        # The batch's own audit, from its report: the intake table receives it only with the next copy.
        rows = [report.audit] if report.audit is not None else []
        if not self.dead.local:  # dead letters by reason come from following the table's files
            m.RECORDS_DEAD.labels(*self.part(ALL), "any").inc(report.dead_lettered)
            m.RECORDS_LATE.labels(*self.part(ALL)).inc(report.late)
        newest_hi: dict[int, int] = {}
        for p, batches in partition_batches(rows).items():
            m.RECORDS_LATE.labels(*self.part(p)).inc(0)  # the series exists (at 0) for stores without lateness
            for b in batches:
                if b.counts is not None:
                    m.RECORDS_IN.labels(*self.part(p)).inc(b.counts[0])
                    m.RECORDS_APPLIED.labels(*self.part(p)).inc(b.counts[1])
                    m.TOMBSTONES_IN.labels(*self.part(p)).inc(b.counts[3])
                if b.hi is not None:
                    newest_hi[p] = b.hi
                    self._advance(p, b.hi + 1)
            last = batches[-1]
            if last.event_ms is not None:
                event = datetime.fromtimestamp(last.event_ms / 1000, tz=UTC)
                m.E2E.labels(*self.part(p), "event").set(max(0.0, (last.committed - event).total_seconds()))
        for (p, reason), n in dead_letter_counts(self.dead.new_rows(self.lineage.lineage_id)).items():
            m.RECORDS_DEAD.labels(*self.part(p), reason).inc(n)
            if reason == layout.REASON_LATE:
                m.RECORDS_LATE.labels(*self.part(p)).inc(n)
        if newest_hi:
            committed_at = max(b[-1].committed for b in partition_batches(rows).values())
            for p, produced in self.positions.produce_times(newest_hi).items():
                m.E2E.labels(*self.part(p), "produce").set(max(0.0, (committed_at - produced).total_seconds()))
        self.refresh_lag()
        for hook in self.after_batch:
            hook()

    def _advance(self, partition: int, next_offset: int) -> None:
        with self._lock:
            if next_offset > self.committed.get(partition, -1):
                self.committed[partition] = next_offset
        m.COMMITTED_OFFSET.labels(*self.part(partition)).set(self.committed[partition])

    # -- positions ------------------------------------------------------------------------------
    def refresh_lag(self) -> None:
        ends = self.positions.end_offsets()
        with self._lock:
            committed = dict(self.committed)
        for p, end in ends.items():
            m.END_OFFSET.labels(*self.part(p)).set(end)
            # A partition the run has not read yet is behind by everything the topic holds past the
            # lineage's start; before the first batch, that is unknown: no lag series.
            if p in committed:
                m.LAG.labels(*self.part(p)).set(lag(end, committed[p]))

    def _refresh_loop(self) -> None:
        while not self._stop.wait(LAG_REFRESH_S):
            self.guarded(self.refresh_lag)

    def start_refreshing(self) -> None:
        self._refresher = threading.Thread(target=self._refresh_loop, daemon=True,
                                           name=f"metrics-lag-{self.store.name}")
        self._refresher.start()

    # -- Spark progress -----------------------------------------------------------------------
    def on_progress(self, fig: Figures) -> None:
        self._worker.submit(self.guarded, self._record_progress, fig)

    def _record_progress(self, fig: Figures) -> None:
        run = self.run
        if fig.input_rate is not None:
            m.INPUT_RATE.labels(*run).set(fig.input_rate)
        if fig.process_rate is not None:
            m.PROCESS_RATE.labels(*run).set(fig.process_rate)
        for phase, ms in fig.phases_ms.items():
            m.TRIGGER_PHASE.labels(*run, phase).set(ms / 1000.0)
        for p, offset in fig.end_offsets.get(self.topic, {}).items():
            self._advance(p, offset)
        if fig.state_rows is not None:
            m.STATE_ROWS.labels(*run).set(fig.state_rows)
            m.STATE_BYTES.labels(*run).set(fig.state_bytes or 0)
        r = fig.rocksdb
        if not any(k.startswith("rocksdb") for k in r):
            return
        if (get := mean_latency_s(r.get("rocksdbGetLatency"), r.get("rocksdbGetCount"))) is not None:
            m.ROCKSDB_GET.labels(*run).set(get)
        if (put := mean_latency_s(r.get("rocksdbPutLatency"), r.get("rocksdbPutCount"))) is not None:
            m.ROCKSDB_PUT.labels(*run).set(put)
        m.ROCKSDB_SST.labels(*run).set(r.get("rocksdbSstFileSize", 0.0))
        if self.memtable_bytes is not None and (memtables := self.memtable_bytes()) >= 0:
            m.ROCKSDB_MEMTABLE.labels(*run).set(memtables)
        m.ROCKSDB_PINNED.labels(*run).set(r.get("rocksdbPinnedBlocksMemoryUsage", 0.0))
        m.ROCKSDB_HIT_RATIO.labels(*run).set(hit_ratio(r.get("rocksdbReadBlockCacheHitCount"),
                                                       r.get("rocksdbReadBlockCacheMissCount")))
        m.ROCKSDB_STALL.labels(*run).inc(r.get("rocksdbWriterStallLatencyMs", 0.0) / 1000.0)
        for phase, key in COMMIT_PHASES.items():
            m.ROCKSDB_COMMIT.labels(*run, phase).set(r.get(key, 0.0) / 1000.0)
        for direction, key in IO_BYTES.items():
            m.ROCKSDB_BYTES.labels(*run, direction).inc(r.get(key, 0.0))

    # -- the end ----------------------------------------------------------------------------------
    def close(self) -> None:
        """Waits for the queued updates (the last batch's figures), then stops; idempotent."""
        if self._stop.is_set():
            return
        self._stop.set()
        self._worker.shutdown(wait=True)
        self.positions.close()
