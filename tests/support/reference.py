"""A pure-Python reference of the player_stats store, written from the store's specification only
(it imports nothing from deltastate), so the integration tests compare the engine with an
independent computation instead of with itself.

Specification, as this module implements it:
  * source records: Kafka (key, value) bytes; key = player_id in UTF-8; value = a JSON object
    {"player_id": str (min length 1), "game_id": str (min length 1), "score": int >= 0,
    "ts": int >= 0}, every field required, other fields allowed. A null value is a tombstone.
  * a record is dead-lettered, with the first reason that applies, in this order:
      missing_key       the Kafka key is null (even for a null value)
      (a keyed tombstone is valid)
      oversized         the value is longer than max_value_bytes
      unparseable_json  the value is not JSON at all
      schema            not a JSON object; a required field missing or null; a field of the wrong
                        JSON type (an integer is a JSON number without fraction or exponent that
                        fits in 64 bits: not a bool, not 1.0, not "1"); a score or ts below 0; an
                        empty player_id or game_id
      key_mismatch      the Kafka key differs from player_id
  * state per player since its latest tombstone: games = count, total_score = sum(score),
    best_score = max(score), last_played = max(ts). A tombstone deletes the player (a tombstone
    for an unknown player changes nothing); later events start it afresh.
  * Kafka keeps a key's records in one partition, in order, so processing every partition in
    offset order gives each key's records in production order. Which partition a key lands on is
    not computed here: callers pass it in (murmur2, or what a consumer read back).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
VALUE_FIELDS = ("games", "total_score", "best_score", "last_played")
CATEGORIES = ("missing_key", "oversized", "unparseable_json", "schema", "key_mismatch")


@dataclass(frozen=True)
class Record:
    """One Kafka record where it sits in the topic."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


class ReferenceTopic:
    """Assigns produced records the (partition, offset) Kafka gives them on a fresh topic: offsets
    count up from 0 per partition, in production order. Keyed records only: a null key goes to a
    random partition, so tests that produce those read the positions back from the broker instead."""

    def __init__(self, partitions: int, partitioner: Callable[[bytes, int], int]) -> None:
        self.partitions = partitions
        self.partitioner = partitioner
        self.records: list[Record] = []
        self._next = [0] * partitions

    def append(self, records: Iterable[tuple[bytes | None, bytes | None]]) -> list[Record]:
        added = []
        for key, value in records:
            if key is None:
                raise ValueError("a null key lands on a random partition; read its position from the broker")
            partition = self.partitioner(key, self.partitions)
            added.append(Record(partition, self._next[partition], key, value))
            self._next[partition] += 1
        self.records.extend(added)
        return added

    def __len__(self) -> int:
        return len(self.records)


# -- validation ----------------------------------------------------------------------------------
def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")  # Python accepts NaN/Infinity, JSON does not


def _is_int64(value: Any) -> bool:
    return type(value) is int and INT64_MIN <= value <= INT64_MAX  # bool is not an integer


def _is_string(value: Any) -> bool:
    return type(value) is str


# field -> (type check, extra check), all required; checked in this order.
_FIELDS: tuple[tuple[str, Callable[[Any], bool], Callable[[Any], bool]], ...] = (
    ("player_id", _is_string, lambda v: len(v) >= 1),
    ("game_id", _is_string, lambda v: len(v) >= 1),
    ("score", _is_int64, lambda v: v >= 0),
    ("ts", _is_int64, lambda v: v >= 0),
)


def category(key: bytes | None, value: bytes | None, max_value_bytes: int) -> str | None:
    """The dead-letter reason category of one record (the reason's prefix before ':'); None when
    the record is applied (an event or a keyed tombstone)."""
    if key is None:
        return "missing_key"
    if value is None:
        return None
    if len(value) > max_value_bytes:
        return "oversized"
    try:
        doc = json.loads(value.decode("utf-8"), parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError):
        return "unparseable_json"
    if not isinstance(doc, dict):
        return "schema"
    for name, type_ok, extra_ok in _FIELDS:
        if name not in doc or doc[name] is None or not type_ok(doc[name]) or not extra_ok(doc[name]):
            return "schema"
    if doc["player_id"] != key.decode("utf-8", errors="replace"):
        return "key_mismatch"
    return None


# -- the store -----------------------------------------------------------------------------------
@dataclass
class Expected:
    state: dict[str, dict[str, int]] = field(default_factory=dict)
    dead_letters: dict[tuple[int, int], str] = field(default_factory=dict)  # (partition, offset) -> category
    records_in: int = 0
    applied: int = 0  # events and keyed tombstones
    dead_lettered: int = 0
    tombstones: int = 0  # applied tombstones

    @property
    def categories(self) -> Counter[str]:
        return Counter(self.dead_letters.values())


def expected(records: Iterable[Record], max_value_bytes: int = 65_536) -> Expected:
    """The store after every record, processed per partition in offset order."""
    out = Expected()
    for rec in sorted(records, key=lambda r: (r.partition, r.offset)):
        out.records_in += 1
        reason = category(rec.key, rec.value, max_value_bytes)
        if reason is not None:
            out.dead_letters[(rec.partition, rec.offset)] = reason
            out.dead_lettered += 1
            continue
        out.applied += 1
        player = rec.key.decode("utf-8")  # type: ignore[union-attr]  # keyed: category checked it
        if rec.value is None:
            out.tombstones += 1
            out.state.pop(player, None)
            continue
        event = json.loads(rec.value)
        held = out.state.get(player)
        if held is None:
            out.state[player] = {"games": 1, "total_score": event["score"], "best_score": event["score"],
                                 "last_played": event["ts"]}
        else:
            held["games"] += 1
            held["total_score"] += event["score"]
            held["best_score"] = max(held["best_score"], event["score"])
            held["last_played"] = max(held["last_played"], event["ts"])
    return out


@dataclass
class ExpectedLRU(Expected):
    """The LRU store (max_entries) after every record: state, and the keys whose latest change is an
    eviction (their changelog record is a delete with reason 'evicted')."""

    evicted: set[str] = field(default_factory=set)


def expected_lru(records: Iterable[Record], capacity: Callable[[int], int],
                 max_value_bytes: int = 65_536) -> ExpectedLRU:
    """The store bounded per partition: partition p holds at most capacity(p) players. A record for
    a player p does not hold, when p is full, first evicts the player whose latest applied record
    is the oldest in p; the evicted player starts afresh on its next record."""
    out = ExpectedLRU()
    held: dict[int, dict[str, dict[str, int]]] = {}
    updated: dict[str, int] = {}  # player -> offset of its latest applied event
    for rec in sorted(records, key=lambda r: (r.partition, r.offset)):
        out.records_in += 1
        if category(rec.key, rec.value, max_value_bytes) is not None:
            out.dead_lettered += 1
            continue
        out.applied += 1
        player = rec.key.decode("utf-8")  # type: ignore[union-attr]
        players = held.setdefault(rec.partition, {})
        out.evicted.discard(player)
        if rec.value is None:
            out.tombstones += 1
            players.pop(player, None)
            continue
        if player not in players and len(players) >= capacity(rec.partition):
            oldest = min(players, key=lambda p: updated[p])
            del players[oldest]
            out.evicted.add(oldest)
        event = json.loads(rec.value)
        stats = players.setdefault(player, {"games": 0, "total_score": 0, "best_score": event["score"],
                                            "last_played": event["ts"]})
        stats["games"] += 1
        stats["total_score"] += event["score"]
        stats["best_score"] = max(stats["best_score"], event["score"])
        stats["last_played"] = max(stats["last_played"], event["ts"])
        updated[player] = rec.offset
    out.state = {player: stats for players in held.values() for player, stats in players.items()}
    return out


V2_FIELDS = ("games", "total_score", "top_score", "last_played", "last_game_id", "avg_score")


def expected_v2(records: Iterable[Record], max_value_bytes: int = 65_536,
                seeded_at: dict[int, int] | None = None) -> dict[str, dict[str, Any]]:
    """player_stats value schema v2 after every record: v1's fields with best_score renamed
    top_score and total_score a double, last_game_id = the game_id of the player's newest event
    since its latest tombstone, avg_score = total_score / games.

    seeded_at (partition -> offset): v2 was built from v1's state at those offsets with last_game_id
    defaulting to "" (the topic no longer held the history): a player live at that point has ""
    until its next event; a player created later has its newest game_id."""
    state: dict[str, dict[str, Any]] = {}
    partition_of: dict[str, int] = {}
    defaulted: set[int] = set()
    for rec in sorted(records, key=lambda r: (r.partition, r.offset)):
        if seeded_at is not None and rec.partition not in defaulted and rec.offset >= seeded_at.get(rec.partition, 0):
            defaulted.add(rec.partition)
            for player, p in partition_of.items():
                if p == rec.partition and player in state:
                    state[player]["last_game_id"] = ""
        if category(rec.key, rec.value, max_value_bytes) is not None:
            continue
        player = rec.key.decode("utf-8")  # type: ignore[union-attr]
        partition_of[player] = rec.partition
        if rec.value is None:
            state.pop(player, None)
            continue
        event = json.loads(rec.value)
        held = state.setdefault(player, {"games": 0, "total_score": 0.0, "top_score": event["score"],
                                         "last_played": event["ts"]})
        held["games"] += 1
        held["total_score"] += float(event["score"])
        held["top_score"] = max(held["top_score"], event["score"])
        held["last_played"] = max(held["last_played"], event["ts"])
        held["last_game_id"] = event["game_id"]
    if seeded_at is not None:  # partitions with no record at or past the seed: every player defaulted
        for player, p in partition_of.items():
            if p not in defaulted and player in state:
                state[player]["last_game_id"] = ""
    for held in state.values():
        held["avg_score"] = held["total_score"] / held["games"]
    return {player: {f: held[f] for f in V2_FIELDS} for player, held in state.items()}


def ranking(state: dict[str, dict[str, int]], by: str = "total_score") -> list[str]:
    """Keys ordered like the store's leaderboard: `by` descending, then key ascending."""
    return sorted(state, key=lambda k: (-state[k][by], k))


def top(state: dict[str, dict[str, int]], n: int, by: str = "total_score") -> list[tuple[str, dict[str, int]]]:
    return [(k, state[k]) for k in ranking(state, by)[:n]]


def rank_of(state: dict[str, dict[str, int]], key: str, by: str = "total_score") -> int:
    return ranking(state, by).index(key) + 1


__all__ = ["CATEGORIES", "Expected", "ExpectedLRU", "Record", "ReferenceTopic", "VALUE_FIELDS", "category",
           "expected", "expected_lru", "expected_v2", "rank_of", "ranking", "top", "V2_FIELDS"]
