"""The pure parts of deltastate.metrics: StreamingQueryProgress JSON as figures, lag, the audit rows'
per-partition figures, OTel names for Prometheus, the metrics port setting."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime

import pytest

from deltastate.config import load_settings
from deltastate.errors import ConfigError
from deltastate.metrics.audit_tail import dead_letter_counts, partition_batches
from deltastate.metrics.otlp_bridge import prom_name
from deltastate.metrics.positions import lag
from deltastate.metrics.progress import figures, hit_ratio, mean_latency_s

# Shaped like Spark 4.2's StreamingQueryProgress.json of a key-value store on RocksDB.
PROGRESS = {
    "id": "q", "runId": "r", "name": "player_stats-stream", "batchId": 7,
    "inputRowsPerSecond": 812.5, "processedRowsPerSecond": "NaN",
    "durationMs": {"addBatch": 1200, "triggerExecution": 1500, "walCommit": 40},
    "stateOperators": [
        {"numRowsTotal": 300, "memoryUsedBytes": 4096,
         "customMetrics": {"rocksdbGetLatency": 30, "rocksdbGetCount": 600, "rocksdbPutLatency": 12,
                           "rocksdbPutCount": 300, "rocksdbSstFileSize": 10_000,
                           "rocksdbReadBlockCacheHitCount": 90, "rocksdbReadBlockCacheMissCount": 10}},
        {"numRowsTotal": 20, "memoryUsedBytes": 100, "customMetrics": {"rocksdbSstFileSize": 500}},
    ],
    "sources": [{"description": "KafkaV2[Subscribe[t]]",
                 "endOffset": json.dumps({"t": {"0": 120, "1": 95}, "other": {"0": 3}})}],
}


def test_progress_figures() -> None:
    fig = figures(PROGRESS)
    assert (fig.batch_id, fig.name, fig.input_rate, fig.process_rate) == (7, "player_stats-stream", 812.5, None)
    assert fig.phases_ms == {"addBatch": 1200.0, "triggerExecution": 1500.0, "walCommit": 40.0}
    assert (fig.state_rows, fig.state_bytes) == (320, 4196)
    assert fig.rocksdb["rocksdbSstFileSize"] == 10_500  # summed over the operators
    assert fig.end_offsets == {"t": {0: 120, 1: 95}, "other": {0: 3}}
    assert mean_latency_s(fig.rocksdb["rocksdbGetLatency"], fig.rocksdb["rocksdbGetCount"]) == pytest.approx(30 / 600 / 1000)
    assert hit_ratio(fig.rocksdb["rocksdbReadBlockCacheHitCount"], fig.rocksdb["rocksdbReadBlockCacheMissCount"]) == 0.9


def test_progress_without_state_or_reads() -> None:
    fig = figures({"batchId": 0, "name": None, "sources": [{"endOffset": None}]})
    assert fig.state_rows is None and fig.rocksdb == {} and fig.end_offsets == {}
    assert mean_latency_s(None, 3) is None and mean_latency_s(5.0, 0) is None
    assert math.isnan(hit_ratio(0, 0))


def test_lag_never_negative() -> None:
    assert lag(120, 100) == 20
    assert lag(100, 100) == 0
    assert lag(90, 100) == 0


def test_partition_batches_from_audit_rows() -> None:
    t1, t2 = datetime(2026, 1, 1, 0, 0, 1), datetime(2026, 1, 1, 0, 0, 2, tzinfo=UTC)
    rows = [
        {"batch_id": 2, "partition_counts": json.dumps({"0": [5, 4, 1, 0]}), "offsets": json.dumps({"0": [10, 14]}),
         "stream_times": json.dumps({"0": 1_000}), "write_time": t2},
        {"batch_id": 1, "partition_counts": json.dumps({"0": [10, 10, 0, 1], "1": [3, 3, 0, 0]}),
         "offsets": json.dumps({"0": [0, 9], "1": [0, 2]}), "stream_times": None, "write_time": t1},
    ]
    out = partition_batches(rows)
    assert [b.counts for b in out[0]] == [(10, 10, 0, 1), (5, 4, 1, 0)]  # batch order
    assert [b.hi for b in out[0]] == [9, 14] and out[1][0].hi == 2
    assert out[0][1].event_ms == 1_000 and out[0][0].event_ms is None
    assert out[0][0].committed.tzinfo is UTC  # naive audit times are UTC
    assert dead_letter_counts([{"partition": 1, "reason": "parse"}, {"partition": 1, "reason": "parse"},
                               {"partition": 0, "reason": "late"}]) == {(1, "parse"): 2, (0, "late"): 1}


def test_otel_names_for_prometheus() -> None:
    assert prom_name("airflow.ti.finish") == "airflow_ti_finish"
    assert prom_name("dagrun.duration.success.my-dag") == "dagrun_duration_success_my_dag"
    assert prom_name("9lives") == "_9lives"


@pytest.mark.parametrize("value", ["-1", "65536", "http", ""])
def test_metrics_port_refused_by_name(value: str) -> None:
    with pytest.raises(ConfigError, match="DELTASTATE_METRICS_PORT"):
        load_settings({"DELTASTATE_METRICS_PORT": value})


def test_metrics_settings() -> None:
    settings = load_settings({"DELTASTATE_METRICS_PORT": "9464", "DELTASTATE_PUSHGATEWAY": " gw:9091 "})
    assert (settings.metrics_port, settings.pushgateway) == (9464, "gw:9091")
    assert load_settings({}).pushgateway is None and load_settings({}).metrics_port == 0


def test_a_push_for_one_store_carries_that_store_samples_only() -> None:
    """A process that restored two stores pushes each store's group with its own samples: the
    gateway would give every sample of a group the group's store label."""
    from deltastate.metrics.exposition import _Families
    from deltastate.metrics.names import JOB_SECONDS, RESTORE_RESTORED

    for store, restored in (("push_a", 10), ("push_b", 20)):
        RESTORE_RESTORED.labels(store).set(restored)
        JOB_SECONDS.labels("restore", store).set(restored / 10)
    samples = [(f.name, s.labels.get("store"), s.value) for f in _Families("restore", "push_a").collect()
               for s in f.samples if s.labels.get("store", "").startswith("push_")]
    assert sorted(samples) == [("deltastate_job_duration_seconds", "push_a", 1.0),
                               ("deltastate_restore_restored_records", "push_a", 10.0)]
    every = {s.labels["store"] for f in _Families("restore").collect() for s in f.samples
             if s.labels.get("store", "").startswith("push_")}
    assert every == {"push_a", "push_b"}  # a job of every store (publish) keeps every store's samples
