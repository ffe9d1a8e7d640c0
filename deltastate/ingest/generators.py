"""Deterministic synthetic workloads for the source topics.

Why synthetic and seeded: benchmarks and crash trials must replay the exact same stream so a
rebuilt store can be compared with an expected one computed from the same seed. Why skewed: real
keys are not uniform (a few players play most games), and hot keys are what stress state stores,
shuffle partitions and compaction. Why fast: benchmarks push millions of records, and the
generator must not be the bottleneck in front of a producer that takes ~100k+ records/s, so all
randomness is drawn with numpy in chunks and only the unavoidable per-record work runs in Python.

The stream for a seed is fixed by this module's algorithm; changing the draws below changes every
recorded expectation, so do it only on purpose.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import numpy as np

__all__ = ["encode", "leaderboard_events", "leaderboard_records", "player_id"]

ZIPF_EXPONENT = 1.1
MAX_SCORE = 10_000
TS_STEP_MS = (1, 4)  # event time advances by a random 1..4 ms per record: increasing, jittered
_CHUNK = 65_536

# Compact JSON of a game_result.v1 event, key order as json.dumps of the dicts we build.
_GAME_RESULT_FMT = '{"player_id":"%s","game_id":"%s","score":%d,"ts":%d}'
_GAME_RESULT_ORDER = ("player_id", "game_id", "score", "ts")


def player_id(index: int) -> str:
    return f"player-{index:06d}"


def _game_id(seed: int, index: int) -> str:
    """Unique within a stream (record index) and across seeds, so two workloads can share a topic."""
    return f"game-{seed}-{index:09d}"


def encode(event: dict[str, Any]) -> bytes:
    """Compact JSON (no spaces), UTF-8. Game results take a format-string fast path (json.dumps
    costs several microseconds a record); it is byte-identical to the json.dumps fallback because
    it is only taken for strings json would not escape (printable, no quote, no backslash)."""
    if tuple(event) == _GAME_RESULT_ORDER:
        pid, gid, score, ts = event.values()
        if (type(score) is int and type(ts) is int and type(pid) is str and type(gid) is str
                and pid.isprintable() and gid.isprintable()
                and '"' not in pid and '"' not in gid and "\\" not in pid and "\\" not in gid):
            return (_GAME_RESULT_FMT % (pid, gid, score, ts)).encode()
    return json.dumps(event, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _popularity(players: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Cumulative Zipf-like weights 1/rank**1.1, and which player holds each rank. The ranking is a
    seeded shuffle so the hottest players are spread over ids (and so over partitions)."""
    weights = 1.0 / np.arange(1, players + 1, dtype=np.float64) ** ZIPF_EXPONENT
    cumulative = np.cumsum(weights)
    cumulative /= cumulative[-1]
    return cumulative, rng.permutation(players)


def _plan(events: int, players: int, seed: int, tombstones: float) -> Iterator[tuple[list[int], list[bool], list[int], list[int]]]:
    """Chunks of (player index, is tombstone, score, ts) per record.

    A tombstone deletes a player that is live (seen in an event and not deleted since): the player
    drawn for that record if live, else one drawn uniformly from the live ones; with nobody live yet
    the record stays an event. Each record is a tombstone with probability `tombstones`, so the
    share matches the fraction up to sampling noise (and none precede the first event).
    """
    if events < 0 or players <= 0:
        raise ValueError(f"need events >= 0 and players > 0, got events={events}, players={players}")
    if not 0.0 <= tombstones < 1.0:
        raise ValueError(f"tombstones is a fraction in [0, 1), got {tombstones}")
    rng = np.random.default_rng(seed)
    cumulative, by_rank = _popularity(players, rng)
    live: list[int] = []  # live players, for uniform picks; pos maps player -> index in live
    pos: dict[int, int] = {}
    ts = start = 0
    while start < events:
        # Always draw whole chunks and cut the last one, so a shorter stream is a prefix of a longer.
        n = min(_CHUNK, events - start)
        ranks = np.minimum(np.searchsorted(cumulative, rng.random(_CHUNK)[:n], side="right"), players - 1)
        who = by_rank[ranks].tolist()
        scores = rng.integers(0, MAX_SCORE + 1, _CHUNK)[:n].tolist()
        stamps = (ts + np.cumsum(rng.integers(TS_STEP_MS[0], TS_STEP_MS[1] + 1, _CHUNK)[:n])).tolist()
        ts = stamps[-1]
        if tombstones > 0.0:
            tomb = (rng.random(_CHUNK)[:n] < tombstones).tolist()
            picks = rng.random(_CHUNK)[:n].tolist()
            for i in range(n):
                p = who[i]
                if tomb[i]:
                    if p not in pos:
                        if not live:
                            tomb[i] = False
                            pos[p] = len(live)
                            live.append(p)
                            continue
                        p = who[i] = live[int(picks[i] * len(live))]
                    last = live.pop()  # swap-remove p from live
                    idx = pos.pop(p)
                    if last != p:
                        live[idx] = last
                        pos[last] = idx
                elif p not in pos:
                    pos[p] = len(live)
                    live.append(p)
        else:
            tomb = [False] * n
        yield who, tomb, scores, stamps
        start += n


def leaderboard_events(events: int, players: int, seed: int, tombstones: float = 0.0,
                       start_ts: int = 1_700_000_000_000) -> Iterator[tuple[str, dict[str, Any] | None]]:
    """(player_id, game_result.v1 event) pairs; the event is None for a tombstone.

    Same arguments, same stream; fewer events give a prefix of the stream. Popularity is Zipf-like
    (weight 1/rank**1.1), so a few players get most games.
    """
    ids = [player_id(i) for i in range(players)]
    index = 0
    for who, tomb, scores, stamps in _plan(events, players, seed, tombstones):
        for p, dead, score, ts in zip(who, tomb, scores, stamps):
            if dead:
                yield ids[p], None
            else:
                yield ids[p], {"player_id": ids[p], "game_id": _game_id(seed, index), "score": score,
                               "ts": start_ts + ts}
            index += 1


def leaderboard_records(events: int, players: int, seed: int, tombstones: float = 0.0,
                        start_ts: int = 1_700_000_000_000) -> Iterator[tuple[bytes, bytes | None]]:
    """The same stream as leaderboard_events, already as Kafka (key, value) bytes: key is the
    player id in UTF-8, value is `encode(event)` or None. This is what the producer is fed; it skips
    the dicts and formats the JSON directly, which roughly halves the per-record cost."""
    keys = [player_id(i).encode() for i in range(players)]
    fmt = ('{"player_id":"%s","game_id":"' + _game_id(seed, 0)[:-9] + '%09d","score":%d,"ts":%d}').encode()
    index = 0
    for who, tomb, scores, stamps in _plan(events, players, seed, tombstones):
        for p, dead, score, ts in zip(who, tomb, scores, stamps):
            key = keys[p]
            yield key, None if dead else fmt % (key, index, score, start_ts + ts)
            index += 1
