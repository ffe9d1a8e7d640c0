"""Every Prometheus metric deltastate exports, named once. Jobs (store runs, restore, compaction,
cleanup, migration, snapshot publishing) share one process-wide registry, JOBS; each REST app keeps
a registry of its own (service.py) built from SERVICE_* names below, so tests and the bench can hold
several apps in one process.

Labels: store, partition (a source partition, as a string), schema_version (the value schema
version a run writes). docs/operations.md lists each family with its meaning.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.process_collector import ProcessCollector

JOBS = CollectorRegistry()
# The driver's resident memory and CPU: the job's own footprint beside the state store's figures.
PROCESS = ProcessCollector(namespace="deltastate_job", registry=JOBS)

RUN = ("store", "schema_version")
PART = ("store", "partition", "schema_version")

# Records a run read and what became of them (records_in = applied + dead_lettered).
RECORDS_IN = Counter("deltastate_records_in", "Records read from the source topic", PART, registry=JOBS)
RECORDS_APPLIED = Counter("deltastate_records_applied", "Records applied to the state", PART, registry=JOBS)
RECORDS_DEAD = Counter("deltastate_records_dead_lettered", "Records written to the dead-letter table, by reason",
                       (*PART, "reason"), registry=JOBS)
RECORDS_LATE = Counter("deltastate_records_late", "Records dropped as late (dead letters with reason late)",
                       PART, registry=JOBS)
TOMBSTONES_IN = Counter("deltastate_tombstones_in", "Tombstones (null values) read from the source topic",
                        PART, registry=JOBS)
CHANGELOG_WRITTEN = Counter("deltastate_changelog_written", "Changelog records written, by op",
                            (*RUN, "op"), registry=JOBS)
COMMITS = Counter("deltastate_commits", "Micro-batches committed (changelog, dead letters, audit)", RUN,
                  registry=JOBS)

# Positions: the next offset the store will read, the topic's end, and the difference.
COMMITTED_OFFSET = Gauge("deltastate_committed_offset", "Next source offset after the committed batches",
                         PART, registry=JOBS)
END_OFFSET = Gauge("deltastate_topic_end_offset", "The source partition's end offset (high watermark)",
                   PART, registry=JOBS)
LAG = Gauge("deltastate_consumer_lag_records", "Topic end offset minus committed offset", PART, registry=JOBS)
E2E = Gauge("deltastate_e2e_latency_seconds",
            "Newest committed batch: commit time minus the newest record's event time (clock=event) or "
            "Kafka produce time (clock=produce)", (*PART, "clock"), registry=JOBS)

# Where a batch's time goes: deltastate's writer phases and Spark's trigger phases.
BATCH_PHASE = Histogram("deltastate_batch_phase_seconds", "Seconds a micro-batch's writer spent per phase",
                        (*RUN, "phase"), registry=JOBS,
                        buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120))
BATCH_SECONDS = Histogram("deltastate_batch_seconds", "Seconds from a micro-batch's start to its commit",
                          RUN, registry=JOBS, buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300))
TRIGGER_PHASE = Gauge("deltastate_trigger_phase_seconds", "Spark's durations of the newest trigger, by phase "
                      "(addBatch, getBatch, latestOffset, queryPlanning, walCommit, commitOffsets, triggerExecution)",
                      (*RUN, "phase"), registry=JOBS)
INPUT_RATE = Gauge("deltastate_input_records_per_second", "Spark's input rate of the newest trigger", RUN,
                   registry=JOBS)
PROCESS_RATE = Gauge("deltastate_processed_records_per_second", "Spark's processing rate of the newest trigger",
                     RUN, registry=JOBS)

# The state store, from StreamingQueryProgress.stateOperators (key-value stores keep Spark state).
STATE_ROWS = Gauge("deltastate_state_rows", "Rows in the Spark state store", RUN, registry=JOBS)
STATE_BYTES = Gauge("deltastate_state_memory_bytes", "Memory the state store uses (RocksDB: memtables, "
                    "block cache, index and filter blocks)", RUN, registry=JOBS)
ROCKSDB_GET = Gauge("deltastate_rocksdb_get_latency_seconds", "Mean RocksDB get latency in the newest batch",
                    RUN, registry=JOBS)
ROCKSDB_PUT = Gauge("deltastate_rocksdb_put_latency_seconds", "Mean RocksDB put latency in the newest batch",
                    RUN, registry=JOBS)
ROCKSDB_SST = Gauge("deltastate_rocksdb_sst_bytes", "Size of RocksDB's SST files", RUN, registry=JOBS)
ROCKSDB_MEMTABLE = Gauge("deltastate_rocksdb_memtable_bytes", "Memory in RocksDB's memtables, every state "
                         "partition of the store this process holds (RocksDB's size-all-mem-tables)", RUN,
                         registry=JOBS)
ROCKSDB_PINNED = Gauge("deltastate_rocksdb_block_cache_pinned_bytes", "Block cache memory pinned by RocksDB",
                       RUN, registry=JOBS)
ROCKSDB_HIT_RATIO = Gauge("deltastate_rocksdb_block_cache_hit_ratio",
                          "Block cache hits / (hits + misses) in the newest batch (NaN: no reads)", RUN,
                          registry=JOBS)
ROCKSDB_STALL = Counter("deltastate_rocksdb_write_stall_seconds", "Seconds writers stalled in RocksDB", RUN,
                        registry=JOBS)
ROCKSDB_COMMIT = Gauge("deltastate_rocksdb_commit_phase_seconds", "RocksDB's state commit, by phase, newest batch",
                       (*RUN, "phase"), registry=JOBS)
ROCKSDB_BYTES = Counter("deltastate_rocksdb_io_bytes", "Bytes RocksDB read and wrote (direction=read|write|flush)",
                        (*RUN, "direction"), registry=JOBS)

# The changelog, as compaction and cleanup leave it.
CHANGELOG_RECORDS = Gauge("deltastate_changelog_records", "Records in the changelog table", ("store",), registry=JOBS)
CHANGELOG_BYTES = Gauge("deltastate_changelog_bytes", "Bytes of the changelog's live data files", ("store",),
                        registry=JOBS)
CHANGELOG_FILES = Gauge("deltastate_changelog_files", "Live data files of the changelog", ("store",), registry=JOBS)
DIRTY_RATIO = Gauge("deltastate_changelog_dirty_ratio", "Share of changelog records that are no longer state",
                    ("store",), registry=JOBS)
LAST_COMPACTION = Gauge("deltastate_last_compaction_timestamp_seconds", "Unix time of the last compaction",
                        ("store",), registry=JOBS)
LAST_CLEANUP = Gauge("deltastate_last_cleanup_timestamp_seconds", "Unix time of the last cleanup", ("store",),
                     registry=JOBS)
COMPACTION_DROPPED = Gauge("deltastate_compaction_dropped_records", "Records the last compaction dropped",
                           ("store", "kind"), registry=JOBS)
CLEANUP_EXPIRED = Gauge("deltastate_cleanup_tombstones_written", "Tombstones the last cleanup wrote",
                        ("store",), registry=JOBS)

# Restore (Kafka Streams' restore-remaining-records-total, restore-rate).
RESTORE_REMAINING = Gauge("deltastate_restore_remaining_records", "State records still to restore", ("store",),
                          registry=JOBS)
RESTORE_RESTORED = Gauge("deltastate_restore_restored_records", "State records restored so far", ("store",),
                         registry=JOBS)
RESTORE_RATE = Gauge("deltastate_restore_records_per_second", "Records restored per second so far", ("store",),
                     registry=JOBS)
RESTORE_SECONDS = Gauge("deltastate_restore_duration_seconds", "Seconds the restore has taken", ("store",),
                        registry=JOBS)

# Snapshots as the publisher built them (the service reports the one it serves).
PUBLISHED_VERSION = Gauge("deltastate_snapshot_published_version", "Version of the newest published snapshot",
                          registry=JOBS)
PUBLISHED_AT = Gauge("deltastate_snapshot_published_timestamp_seconds", "Unix time the newest snapshot was published",
                     registry=JOBS)
BUILD_SECONDS = Gauge("deltastate_snapshot_build_seconds", "Seconds the newest publish took", registry=JOBS)
SNAPSHOT_ROWS = Gauge("deltastate_snapshot_rows", "Rows of each store in the newest snapshot", ("store",),
                      registry=JOBS)

# Migrations: the phase a store's migration is in (1 for the current phase) and its versions.
MIGRATION_PHASE = Gauge("deltastate_migration_phase", "1 for the phase a store's migration is in",
                        ("store", "phase"), registry=JOBS)
MIGRATION_VERSION = Gauge("deltastate_migration_target_version", "The value schema version a migration builds",
                          ("store",), registry=JOBS)
MIGRATION_LAG = Gauge("deltastate_migration_lag_records", "Records the new version still has to read "
                      "to catch up with the live one", ("store", "schema_version"), registry=JOBS)

# Every job, by kind (run, restore, compact, cleanup, migrate, publish): when it last finished and how
# long it took. "kind", not "job": the Pushgateway's grouping key owns the job label.
JOB_SECONDS = Gauge("deltastate_job_duration_seconds", "Seconds the job's last run took", ("kind", "store"),
                    registry=JOBS)
JOB_DONE = Gauge("deltastate_job_last_success_timestamp_seconds", "Unix time the job last finished",
                 ("kind", "store"), registry=JOBS)

# What each kind of job pushes (a push replaces its whole group, so each carries its own families).
PUSHED = {
    "run": (RECORDS_IN, RECORDS_APPLIED, RECORDS_DEAD, RECORDS_LATE, TOMBSTONES_IN, CHANGELOG_WRITTEN, COMMITS,
            COMMITTED_OFFSET, END_OFFSET, LAG, E2E, BATCH_PHASE, BATCH_SECONDS, TRIGGER_PHASE, INPUT_RATE,
            PROCESS_RATE, STATE_ROWS, STATE_BYTES, ROCKSDB_GET, ROCKSDB_PUT, ROCKSDB_SST, ROCKSDB_PINNED,
            ROCKSDB_HIT_RATIO, ROCKSDB_STALL, ROCKSDB_COMMIT, ROCKSDB_BYTES),
    "compact": (CHANGELOG_RECORDS, CHANGELOG_BYTES, CHANGELOG_FILES, DIRTY_RATIO, LAST_COMPACTION,
                COMPACTION_DROPPED),
    "cleanup": (LAST_CLEANUP, CLEANUP_EXPIRED),
    "restore": (RESTORE_REMAINING, RESTORE_RESTORED, RESTORE_RATE, RESTORE_SECONDS),
    "publish": (PUBLISHED_VERSION, PUBLISHED_AT, BUILD_SECONDS, SNAPSHOT_ROWS),
    "migrate": (MIGRATION_PHASE, MIGRATION_VERSION, MIGRATION_LAG),
}

# The query service (one registry per app: service.py builds these).
SERVICE_LATENCY = "deltastate_request_seconds"
SERVICE_REQUESTS = "deltastate_requests"
SERVICE_ERRORS = "deltastate_errors"
SERVICE_SWAPS = "deltastate_snapshot_swaps"
SERVICE_SNAPSHOT_AGE = "deltastate_snapshot_age_seconds"
SERVICE_SNAPSHOT_VERSION = "deltastate_snapshot_version"
