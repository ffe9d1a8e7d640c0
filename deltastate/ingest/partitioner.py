"""Kafka's default key partitioner (murmur2) in pure Python.

Why: a state store's shards follow the Kafka partitions of its source topic, so deltastate must know,
without asking a broker, which partition a key lives on (to route a point lookup, to check that a
changelog row sits where Kafka Streams would have put it, to build test expectations). Java clients
put a keyed record on `toPositive(Utils.murmur2(keyBytes)) % numPartitions`, and librdkafka's
`murmur2_random` partitioner does the same for non-null keys; this module reproduces it bit for bit.

The algorithm is MurmurHash2 (32-bit) with Kafka's seed 0x9747b28c, computed in Java `int`
arithmetic: every multiplication wraps at 32 bits and `>>>` is an unsigned shift. Python ints do not
wrap, so we keep values in [0, 2**32) with a mask and only convert to a signed int at the end, which
is what Java's `murmur2` returns.
"""

from __future__ import annotations

import struct

__all__ = ["SEED", "murmur2", "partition_for", "to_positive"]

SEED = 0x9747B28C
_M = 0x5BD1E995
_R = 24
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's `Utils.murmur2(data)`: a signed 32-bit int, exactly as the Java client computes it."""
    data = bytes(data)
    length = len(data)
    h = (SEED ^ length) & _MASK
    blocks = length // 4
    # Java reads each 4-byte block little-endian, bytes taken as unsigned: "<I" is the same.
    for k in struct.unpack_from(f"<{blocks}I", data):
        k = (k * _M) & _MASK
        k ^= k >> _R
        k = (k * _M) & _MASK
        h = (h * _M) & _MASK
        h ^= k
    tail = length & 3
    base = length - tail
    # The Java switch falls through: case 3 also does case 2 and case 1.
    if tail == 3:
        h ^= data[base + 2] << 16
    if tail >= 2:
        h ^= data[base + 1] << 8
    if tail >= 1:
        h ^= data[base]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - 0x1_0000_0000 if h & 0x8000_0000 else h


def to_positive(number: int) -> int:
    """Kafka's `Utils.toPositive`: clear the sign bit (not abs(), which differs for negatives)."""
    return number & 0x7FFFFFFF


def partition_for(key: str | bytes, partitions: int) -> int:
    """The partition a Java producer (or librdkafka with `murmur2_random`) picks for a non-null key.

    A str key is hashed as its UTF-8 bytes, which is what Kafka's StringSerializer sends.
    """
    if partitions <= 0:
        raise ValueError(f"partitions must be positive, got {partitions}")
    key_bytes = key.encode("utf-8") if isinstance(key, str) else bytes(key)
    return to_positive(murmur2(key_bytes)) % partitions
