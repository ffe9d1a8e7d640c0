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
from support.reference import expected
from support.store_checks import STORE, assert_changelog_unique, assert_state, event, new_topic, produce, published_state

from deltastate.engine import run_store
from deltastate.maintenance import cleanup_store
from deltastate.maintenance.stats import now_ms
from deltastate.stores import load_store

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1200)]
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
    first = [f"r1-{i:03d}" for i in range(60)]
    produce(settings, topic, _events(first, 1), ref)
    run_store(settings, STORE, once=True, topic=topic)
    cut = now_ms() + 1  # round 1 was written before the cut, round 2 after
    second = [f"r2-{i:03d}" for i in range(60)] + first[:15]  # fresh keys, and a quarter of round 1 again
    produce(settings, topic, _events(second, 2), ref)
    run_store(settings, STORE, once=True, topic=topic)
    exp = expected(ref.records, settings.max_value_bytes)
    idle = sorted(set(exp.state) - set(second))  # last written in round 1
    assert len(idle) == 45

    # One idle key gets an event the stream has not applied yet: cleanup must spare it.
    updated = idle[0]
    produce(settings, topic, _events([updated], 3), ref)
    report = cleanup_store(settings, STORE, spark=spark, now_ms=cut + TTL_MS, topic=topic)
    doomed = idle[1:]
    assert (report.candidates, report.spared, report.tail_records, report.raced) == (len(idle), 1, 1, ())
    assert report.expired_keys == report.tombstones_written == len(doomed)
    ref.append([(k.encode(), None) for k in doomed])  # cleanup produces them in key order
    # A rerun before the stream applies them sees them pending and sends none again.
    rerun = cleanup_store(settings, STORE, spark=spark, now_ms=cut + TTL_MS, topic=topic)
    assert (rerun.expired_keys, rerun.spared, rerun.tail_records) == (0, len(idle), len(doomed) + 1)

    # An expired key's next event starts it afresh: the stream's own state forgot the old value.
    comeback = doomed[0]
    old = exp.state[comeback]
    produce(settings, topic, [(comeback.encode(), event(comeback, 3, 77))], ref)
    run_store(settings, STORE, once=True, topic=topic)
    final = expected(ref.records, settings.max_value_bytes)
    state = published_state(spark, settings)
    assert_state(state, final)
    assert not set(doomed[1:]) & set(state)  # expired keys are gone from the snapshot
    assert state[comeback] == {"games": 1, "total_score": 3, "best_score": 3, "last_played": 77} != old
    # The live state is what was touched since the cut (plus the spared and the returning key),
    # not everything ever produced.
    assert set(state) == set(second) | {updated, comeback}
    assert_changelog_unique(spark, settings)
