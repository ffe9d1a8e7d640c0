"""`bench ingest` through the real parts, small: the figures it prints are the ones the issues are
judged by, so each is checked against the reference fed the bench's own workload (records in,
applied, dead-lettered; changelog records = the entries one batch changes) and against the
changelog table the run wrote."""

from __future__ import annotations

import pytest
from support.reference import ReferenceTopic, expected
from support.reference_windowed import SPECS, run

from deltastate.bench.ingest import DEFAULT_KEYS, bench_records, run_ingest_bench
from deltastate.ingest.partitioner import partition_for
from deltastate.stores import load_store

pytestmark = pytest.mark.integration
EVENTS = 3_000
SEED = 7


def reference_figures(store: str, keys: int, partitions: int) -> tuple[int, int, int]:
    """(applied, dead-lettered, changelog records) of one --once batch over the bench's workload."""
    topic = ReferenceTopic(partitions, partition_for)
    topic.append(bench_records(store, EVENTS, keys, SEED))
    if store in SPECS:
        outcome = run(SPECS[store], topic.records)
        # From empty state, one batch writes one put per entry it leaves (nothing here is past
        # retention, and windows a checkout removes in the same batch were never written).
        return outcome.applied, len(outcome.late), len(outcome.state)
    kv = expected(topic.records)
    applied_keys = {r.key for r in topic.records if (r.partition, r.offset) not in kv.dead_letters}
    return kv.applied, kv.dead_lettered, len(applied_keys)  # one put or tombstone per changed key


@pytest.mark.parametrize("store,keys", [("player_stats", 300), ("trade_stats", 20), ("pulse_counts", 25),
                                        ("user_sessions", None)])
def test_bench_figures_match_the_reference(store, keys, broker, spark, make_settings):
    settings = make_settings()
    definition = load_store(settings, store)
    figures = run_ingest_bench(settings, EVENTS, keys, SEED, None, store)
    used_keys = DEFAULT_KEYS[definition.type] if keys is None else keys
    assert (figures.store, figures.events, figures.keys) == (store, EVENTS, used_keys)

    applied, dead_lettered, changelog = reference_figures(store, used_keys, definition.source.partitions)
    assert figures.records_in == EVENTS
    assert (figures.applied, figures.dead_lettered) == (applied, dead_lettered)
    assert figures.changelog_records == changelog
    assert figures.events_per_second == pytest.approx(EVENTS / figures.run_seconds)

    # The figure is what the run committed: the bench's own storage root holds the changelog.
    (written,) = (settings.home / "bench").glob(f"*/stores/{store}/changelog")
    assert spark.read.format("delta").load(str(written)).count() == changelog
    lines = "\n".join(figures.lines())
    assert f"{EVENTS:,} events, {used_keys:,} keys" in lines and f"{changelog:,}" in lines
