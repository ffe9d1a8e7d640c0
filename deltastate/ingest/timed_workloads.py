"""Seeded workloads for the window and session stores: trades, pulses and clicks.

Event time advances by a jittered step per record, so windows fill and close as they would live;
a share of records is moved back in time to exercise Kafka Streams' rules: `disorder` records by
less than the store's grace (out of order, still applied) and `late` records by more (late, dead-
lettered). Keys follow the same Zipf-like popularity as the leaderboard, spread over partitions.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

_CHUNK = 65_536
ZIPF_EXPONENT = 1.1
PAGES = ("/", "/search", "/cart", "/checkout", "/help", "/account", "/product", "/deals")


@dataclass(frozen=True)
class TimeShape:
    start_ts: int = 1_700_000_000_000
    step_ms: int = 20  # mean event-time step between consecutive records
    disorder: float = 0.0  # fraction of records moved back by 1..disorder_ms
    disorder_ms: int = 1_000
    late: float = 0.0  # fraction of records moved back by late_ms..2*late_ms
    late_ms: int = 60_000


def _keys(prefix: str, n: int) -> list[bytes]:
    return [f"{prefix}-{i:06d}".encode() for i in range(n)]


def _draws(total: int, keys: int, seed: int, shape: TimeShape) -> Iterator[tuple[list[int], list[int], np.random.Generator]]:
    """Chunks of (key index, event time) per record; the generator for workload-specific draws."""
    if total < 0 or keys <= 0:
        raise ValueError(f"need events >= 0 and keys > 0, got events={total}, keys={keys}")
    for frac in (shape.disorder, shape.late):
        if not 0.0 <= frac < 1.0:
            raise ValueError(f"fractions must lie in [0, 1), got {frac}")
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, keys + 1, dtype=np.float64) ** ZIPF_EXPONENT
    cumulative = np.cumsum(weights) / weights.sum()
    by_rank = rng.permutation(keys)
    clock, done = 0, 0
    while done < total:
        n = min(_CHUNK, total - done)
        who = by_rank[np.minimum(np.searchsorted(cumulative, rng.random(_CHUNK)[:n], side="right"), keys - 1)]
        steps = rng.integers(0, 2 * shape.step_ms + 1, _CHUNK)[:n]
        ts = clock + np.cumsum(steps)
        clock = int(ts[-1])
        shift = np.zeros(n, dtype=np.int64)
        u = rng.random(_CHUNK)[:n]
        back = rng.random(_CHUNK)[:n]
        disordered = u < shape.disorder
        late = (u >= shape.disorder) & (u < shape.disorder + shape.late)
        shift[disordered] = 1 + (back[disordered] * max(shape.disorder_ms - 1, 1)).astype(np.int64)
        shift[late] = shape.late_ms + (back[late] * shape.late_ms).astype(np.int64)
        yield who.tolist(), (shape.start_ts + np.maximum(ts - shift, 0)).tolist(), rng
        done += n


def trade_records(total: int, symbols: int, seed: int, shape: TimeShape = TimeShape(),
                  tombstones: float = 0.0) -> Iterator[tuple[bytes, bytes | None]]:
    """Trades; a `tombstones` share are null values (delete the symbol's windows)."""
    keys = _keys("SYM", symbols)
    for who, stamps, rng in _draws(total, symbols, seed, shape):
        prices = np.round(rng.uniform(1.0, 500.0, len(who)), 2).tolist()
        qty = rng.integers(1, 101, len(who)).tolist()
        kind = rng.random(len(who)).tolist() if tombstones else [1.0] * len(who)
        for k, ts, price, q, u in zip(who, stamps, prices, qty, kind):
            key = keys[k]
            yield key, None if u < tombstones else b'{"symbol":"%s","price":%r,"qty":%d,"ts":%d}' % (key, price, q, ts)


def pulse_records(total: int, patients: int, seed: int, shape: TimeShape = TimeShape(),
                  checkouts: float = 0.0, tombstones: float = 0.0) -> Iterator[tuple[bytes, bytes | None]]:
    """Pulses; a `checkouts` share are checkout events (delete the patient's windows), a
    `tombstones` share null values (delete too, the Kafka way)."""
    keys = _keys("patient", patients)
    for who, stamps, rng in _draws(total, patients, seed, shape):
        kind = rng.random(len(who)).tolist()
        for k, ts, u in zip(who, stamps, kind):
            key = keys[k]
            if u < tombstones:
                yield key, None
            elif u < tombstones + checkouts:
                yield key, b'{"patient_id":"%s","ts":%d,"event":"checkout"}' % (key, ts)
            else:
                yield key, b'{"patient_id":"%s","ts":%d}' % (key, ts)


def click_records(total: int, users: int, seed: int, shape: TimeShape = TimeShape(step_ms=2_000),
                  tombstones: float = 0.0) -> Iterator[tuple[bytes, bytes | None]]:
    """Clicks; with the default 2 s mean step and Zipf popularity, hot users stay in one long
    session while rare users come back after more than the gap (new sessions), and out-of-order
    clicks land between sessions and merge them."""
    keys = _keys("user", users)
    for who, stamps, rng in _draws(total, users, seed, shape):
        pages = rng.integers(0, len(PAGES), len(who)).tolist()
        kind = rng.random(len(who)).tolist()
        for k, ts, page, u in zip(who, stamps, pages, kind):
            key = keys[k]
            if u < tombstones:
                yield key, None
            else:
                yield key, json.dumps({"user_id": key.decode(), "page": PAGES[page], "ts": ts},
                                      separators=(",", ":")).encode()
