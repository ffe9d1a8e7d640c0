"""Key-value TTL through the real parts: the ttl tombstones go to the source topic, the running store
applies them like any tombstone, expired keys leave the snapshot, the live state stays bounded while
keys churn, a key updated but not yet applied is spared, a rerun sends no duplicates, and an expired
key's next event starts it afresh instead of bringing the old value back. Compared with the
independent reference (tests/reference.py) fed the same topic, tombstones included."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest
from reference import expected
from store_checks import STORE, assert_changelog_unique, assert_state, event, new_topic, produce, published_state

from deltastate.engine.runner import run_store
from deltastate.maintenance import cleanup_store
from deltastate.maintenance.stats import now_ms
from deltastate.stores import load_store

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]
TTL_MS = 3_600_000


def ttl_schemas(settings, folder: Path, ttl: str) -> Path:
    """A copy of the schemas with player_stats given `ttl`."""
    shutil.copytree(settings.schemas_dir, folder)
    path = folder / "stores" / f"{STORE}.yaml"
    path.write_text(path.read_text() + f"\nttl: {ttl}\n")
    return folder


def _events(keys: list[str], round_: int) -> list[tuple[bytes, bytes]]:
    return [(k.encode(), event(k, 10 * round_ + i % 7, 1_000 * round_ + i)) for i, k in enumerate(keys)]


def test_ttl_expires_idle_keys_through_the_stream(broker: str, spark, make_settings, topic: str, tmp_path) -> None:
    base = make_settings()
    settings = dataclasses.replace(base, schemas_dir=ttl_schemas(base, tmp_path / "schemas", "1h"))
    assert load_store(settings, STORE).ttl_ms == TTL_MS
    ref = new_topic(settings, broker, topic)
    per_round = 40
    live_sizes: list[int] = []
    touched_by_round: list[set[str]] = []
    cuts: list[int] = []
    for r in range(3):  # each round: fresh keys, plus a quarter of the previous round's touched again
        fresh = [f"r{r}-{i:03d}" for i in range(per_round)]
        again = sorted(touched_by_round[-1])[: per_round // 4] if touched_by_round else []
        produce(settings, topic, _events(fresh + again, r + 1), ref)
        run_store(settings, STORE, once=True, topic=topic)
        touched_by_round.append(set(fresh) | set(again))
        cuts.append(now_ms() + 1)  # every write of this round is before the cut, the next round's after
        if r == 0:
            continue
        # Keys not written in this round were last written before the previous cut.
        exp = expected(ref.records, settings.max_value_bytes)
        doomed = sorted(set(exp.state) - touched_by_round[-1])
        report = cleanup_store(settings, STORE, spark=spark, now_ms=cuts[-2] + TTL_MS, topic=topic)
        assert (report.expired_keys, report.candidates, report.spared, report.raced) == (len(doomed), len(doomed), 0, ())
        ref.append([(k.encode(), None) for k in doomed])  # cleanup produces them in key order
        run_store(settings, STORE, once=True, topic=topic)
        state = published_state(spark, settings)
        assert_state(state, expected(ref.records, settings.max_value_bytes))
        assert not set(doomed) & set(state)  # expired keys are gone from the snapshot
        live_sizes.append(len(state))
    # Churn keeps the live state at about one round's keys, not the sum of all rounds.
    assert live_sizes == [len(touched_by_round[1]), len(touched_by_round[2])]
    assert max(live_sizes) <= per_round + per_round // 4

    # A key updated in the topic but not yet applied is spared; the others expire. A rerun before
    # the stream applies the tombstones sees them pending and sends none again.
    exp = expected(ref.records, settings.max_value_bytes)
    updated = sorted(exp.state)[0]
    produce(settings, topic, _events([updated], 9), ref)
    late = now_ms() + TTL_MS + 1  # everything is past the ttl now
    report = cleanup_store(settings, STORE, spark=spark, now_ms=late, topic=topic)
    doomed = sorted(set(exp.state) - {updated})
    assert (report.candidates, report.spared, report.expired_keys) == (len(exp.state), 1, len(doomed))
    assert report.tail_records == 1
    ref.append([(k.encode(), None) for k in doomed])
    rerun = cleanup_store(settings, STORE, spark=spark, now_ms=late, topic=topic)
    assert (rerun.expired_keys, rerun.spared, rerun.tail_records) == (0, len(exp.state), len(doomed) + 1)

    # An expired key's next event starts it afresh: the stream's own state forgot the old value.
    comeback = doomed[0]
    old = exp.state[comeback]
    produce(settings, topic, [(comeback.encode(), event(comeback, 3, 77))], ref)
    run_store(settings, STORE, once=True, topic=topic)
    final = expected(ref.records, settings.max_value_bytes)
    state = published_state(spark, settings)
    assert_state(state, final)
    assert state[comeback] == {"games": 1, "total_score": 3, "best_score": 3, "last_played": 77} != old
    assert set(state) == {updated, comeback}
    assert_changelog_unique(spark, settings)
