"""`bench peers` through the real parts, small: Kafka Streams (built from bench/peers/pom.xml) and
`deltastate run --once`, each a new process on one produced backlog, both read every record and apply
what the reference applies; the printed rates and ratios are the ones the runs measured."""

from __future__ import annotations

import json

import pytest
from support.reference import ReferenceTopic, expected

from deltastate.bench.ingest import bench_records
from deltastate.bench.peers import STORE, run_peers_bench
from deltastate.ingest.partitioner import partition_for
from deltastate.stores import load_store

pytestmark = pytest.mark.integration
EVENTS = 4_000
KEYS = 300
SEED = 11


def test_both_peers_read_and_apply_the_whole_backlog(broker, make_settings):
    settings = make_settings()
    figures = run_peers_bench(settings, EVENTS, KEYS, SEED)

    topic = ReferenceTopic(load_store(settings, STORE).source.partitions, partition_for)
    topic.append(bench_records(STORE, EVENTS, KEYS, SEED))
    reference = expected(topic.records)
    for run in (figures.kafka_streams, figures.deltastate):
        assert run.records == EVENTS
        assert run.applied == reference.applied
        assert 0 < run.processing_seconds < run.wall_seconds
    assert figures.rate_ratio == pytest.approx(figures.deltastate.rate / figures.kafka_streams.rate)
    shown = json.loads(json.dumps(figures.to_dict()))
    assert shown["kafka_streams"]["records"] == shown["deltastate"]["records"] == EVENTS
    assert f"{EVENTS:,} events, {KEYS:,} keys" in "\n".join(figures.lines())
