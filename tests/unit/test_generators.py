"""The leaderboard workload: seeded, skewed, schema-valid, tombstones only for live players."""

from __future__ import annotations

import json
import statistics
import time
from collections import Counter

import pytest

from deltastate.ingest.generators import encode, leaderboard_events, leaderboard_records

START = 1_700_000_000_000


def test_same_seed_same_stream_other_seed_other_stream() -> None:
    a = list(leaderboard_events(5_000, 500, seed=42, tombstones=0.1))
    b = list(leaderboard_events(5_000, 500, seed=42, tombstones=0.1))
    c = list(leaderboard_events(5_000, 500, seed=43, tombstones=0.1))
    assert a == b
    assert a != c
    # A prefix of a longer stream is the shorter stream (chunking does not change the draws).
    assert list(leaderboard_events(70_000, 500, seed=42))[:5_000] == list(leaderboard_events(5_000, 500, seed=42))


def test_events_follow_game_result_v1() -> None:
    game_ids = set()
    last_ts = START
    for key, event in leaderboard_events(20_000, 1_000, seed=1, start_ts=START):
        assert event is not None
        assert list(event) == ["player_id", "game_id", "score", "ts"]
        assert event["player_id"] == key and key.startswith("player-") and len(key) == len("player-000123")
        assert 0 <= int(key.removeprefix("player-")) < 1_000
        assert isinstance(event["score"], int) and 0 <= event["score"] <= 10_000
        assert event["ts"] > last_ts  # increasing, with 1..4 ms jitter
        assert event["ts"] - last_ts <= 4
        last_ts = event["ts"]
        game_ids.add(event["game_id"])
    assert len(game_ids) == 20_000


def test_popularity_is_skewed() -> None:
    counts = Counter(key for key, _ in leaderboard_events(100_000, 1_000, seed=3))
    per_player = [counts.get(f"player-{i:06d}", 0) for i in range(1_000)]
    top = max(per_player)
    assert top > 20 * statistics.median(per_player)
    assert top > 5_000  # rank 1 of Zipf(1.1) over 1000 players: ~1/6.5 of all games
    # The hottest player is not simply player-000000: ranks are shuffled over ids.
    assert sum(1 for c in per_player[:10] if c > 1_000) < 10


@pytest.mark.parametrize("fraction", [0.0, 0.05, 0.3])
def test_tombstone_fraction_and_only_live_players(fraction: float) -> None:
    live: set[str] = set()
    dead = 0
    stream = list(leaderboard_events(50_000, 2_000, seed=9, tombstones=fraction))
    for key, event in stream:
        if event is None:
            assert key in live, f"tombstone for {key}, which is not live"
            live.discard(key)
            dead += 1
        else:
            live.add(key)
    assert abs(dead / len(stream) - fraction) < 0.01
    if fraction == 0.0:
        assert dead == 0


def test_first_record_is_never_a_tombstone() -> None:
    for seed in range(20):
        _key, event = next(iter(leaderboard_events(10, 10, seed=seed, tombstones=0.99)))
        assert event is not None


def test_encode_is_compact_json_and_matches_records() -> None:
    events = list(leaderboard_events(3_000, 300, seed=5, tombstones=0.2))
    records = list(leaderboard_records(3_000, 300, seed=5, tombstones=0.2))
    assert len(records) == len(events)
    for (key, event), (kbytes, value) in zip(events, records):
        assert kbytes == key.encode("utf-8")
        if event is None:
            assert value is None
        else:
            assert value == encode(event) == json.dumps(event, separators=(",", ":")).encode()
            assert json.loads(value) == event


def test_encode_falls_back_to_json_for_other_shapes() -> None:
    odd = {"player_id": 'a"b\\c\n', "game_id": "ü", "score": 1, "ts": 2}
    assert encode(odd) == json.dumps(odd, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    assert json.loads(encode(odd)) == odd
    assert encode({"x": [1, 2], "y": None}) == b'{"x":[1,2],"y":null}'
    assert encode({"player_id": "p", "game_id": "g", "score": True, "ts": 2}) == b'{"player_id":"p","game_id":"g","score":true,"ts":2}'


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"events": -1}, "events"), ({"players": 0}, "players"), ({"tombstones": 1.0}, "tombstones"),
    ({"tombstones": -0.1}, "tombstones"),
])
def test_bad_arguments(kwargs: dict[str, float], match: str) -> None:
    args = {"events": 10, "players": 10, "seed": 1, **kwargs}
    with pytest.raises(ValueError, match=match):
        list(leaderboard_events(**args))  # type: ignore[arg-type]


def test_two_million_events_well_under_ten_seconds() -> None:
    """CPU time, not wall time, so a busy machine does not fail it."""
    started = time.process_time()
    n = 0
    for _ in leaderboard_events(2_000_000, 10_000, seed=11, tombstones=0.05):
        n += 1
    elapsed = time.process_time() - started
    print(f"leaderboard_events: {n / elapsed:,.0f} events/s (CPU)")
    assert n == 2_000_000
    assert elapsed < 7.0
