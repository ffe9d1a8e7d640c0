"""`bench peers` through the real parts, small: player_stats' Kafka Streams topology (built from
bench/peers/pom.xml) and `deltastate run --once`, each a new process on one produced backlog; both read
every record and apply what the independent reference applies; the printed rates and ratios are the
ones the runs measured. The window and session topologies run alone (the deltastate side of the
bench is the same code for every store): each reads every record and hands every valid one to its
aggregation."""

from __future__ import annotations

import json

import pytest
from support.reference import ReferenceTopic, expected
from support.reference_windowed import SPECS
from support.reference_windowed import run as fold_windowed

from deltastate.bench.ingest import bench_records
from deltastate.bench.peers import PEERS, peer_classpath, produce_backlog, run_peer, run_peers_bench
from deltastate.ingest.partitioner import partition_for
from deltastate.stores import load_store

pytestmark = pytest.mark.integration
SEED = 11
# events and keys per store: small backlogs.
SIZES = {"player_stats": (4_000, 300), "trade_stats": (3_000, 20), "user_sessions": (2_000, 40)}


def reference_counts(settings, store: str, events: int, keys: int) -> tuple[int, int, int]:
    """(valid records, applied, late) of the backlog, folded here."""
    topic = ReferenceTopic(load_store(settings, store).source.partitions, partition_for)
    topic.append(bench_records(store, events, keys, SEED))
    if store == "player_stats":
        applied = expected(topic.records).applied
        return applied, applied, 0
    late = len(fold_windowed(SPECS[store], topic.records).late)
    valid = sum(1 for r in topic.records if r.value is not None)
    return valid, valid - late, late


@pytest.mark.parametrize(("warmup_events", "against_floor", "resident"),
                         [(0, False, False), (1_500, True, False), (1_500, False, True)])
def test_both_peers_read_and_apply_the_whole_backlog(broker, make_settings, warmup_events, against_floor, resident):
    """With warm-up events, each side first reads a separate backlog in the same process (resident:
    deltastate's resident driver reads it through a copy of the store): the measured figures are
    still the measured backlog's alone. Spark's floor reads the same backlog."""
    store = "player_stats"
    settings = make_settings()
    events, keys = SIZES[store]
    figures = run_peers_bench(settings, events, keys, SEED, store, warmup_events, against_floor, resident)
    assert ("deltastate in a resident driver" in "\n".join(figures.lines())) == resident
    if resident:  # the bench's driver is stopped again
        assert not (settings.home / "driver" / "driver.sock").exists()
    if against_floor:
        assert figures.floor is not None and figures.floor.records == events
        assert 0 < figures.floor.processing_seconds <= figures.floor.wall_seconds
        assert f"{figures.deltastate.rate / figures.floor.rate:.2f}x" in "\n".join(figures.lines())
    else:
        assert figures.floor is None and "spark floor" not in "\n".join(figures.lines())

    valid, applied, late = reference_counts(settings, store, events, keys)
    assert figures.kafka_streams.records == figures.deltastate.records == events
    assert figures.kafka_streams.applied == valid
    assert (figures.deltastate.applied, figures.deltastate.late) == (applied, late)
    for run in (figures.kafka_streams, figures.deltastate):
        assert 0 < run.processing_seconds < run.wall_seconds
    assert figures.rate_ratio == pytest.approx(figures.deltastate.rate / figures.kafka_streams.rate)
    shown = json.loads(json.dumps(figures.to_dict()))
    assert shown["store"] == store and shown["kafka_streams"]["records"] == shown["deltastate"]["records"] == events
    assert f"bench peers {store}: {events:,} events, {keys:,} keys" in "\n".join(figures.lines())
    assert shown["warmup_events"] == warmup_events
    assert ("warm from an untimed" in "\n".join(figures.lines())) == bool(warmup_events)


@pytest.mark.parametrize("store", sorted(set(PEERS) - {"player_stats"}))
def test_windowed_peer_reads_the_whole_backlog(broker, make_settings, store):
    settings = make_settings()
    events, keys = SIZES[store]
    topic = produce_backlog(settings, store, events, keys, SEED)
    run = run_peer(settings, store, topic, events, peer_classpath(settings))

    valid, _, _ = reference_counts(settings, store, events, keys)
    assert (run.records, run.applied) == (events, valid)
    assert 0 < run.processing_seconds < run.wall_seconds
