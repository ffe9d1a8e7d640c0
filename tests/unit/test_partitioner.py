"""murmur2 against published vectors from the Java client and from librdkafka."""

from __future__ import annotations

import pytest

from deltastate.ingest.partitioner import murmur2, partition_for, to_positive

# apache/kafka clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java, testMurmur2.
JAVA_VECTORS = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (bytes([ord("a"), ord("b"), ord("c")]), 479470107),
]

# librdkafka src/rdmurmur2.c, unittest_murmur2: `java_murmur2_results` (int32 written as hex).
# The "unaligned" suffixes cover every tail length 0..3 and blocks starting at odd addresses.
_UNALIGNED = "PreAmbleWillBeRemoved,ThePrePartThatIs"
LIBRDKAFKA_VECTORS = [
    ("kafka", 0xD067CF64),
    ("giberish123456789", 0x8F552B0C),
    ("1234", 0x9FC97B14),
    ("234", 0xE7C009CA),
    ("34", 0x873930DA),
    ("4", 0x5A4B5CA1),
    (_UNALIGNED, 0x78424F1C),
    (_UNALIGNED[1:], 0x4A62B377),
    (_UNALIGNED[2:], 0xE0E4E09E),
    (_UNALIGNED[3:], 0x62B8B43F),
    ("", 0x106E08D9),
]


def _signed(value: int) -> int:
    return value - (1 << 32) if value & 0x8000_0000 else value


@pytest.mark.parametrize(("data", "expected"), JAVA_VECTORS)
def test_java_client_vectors(data: bytes, expected: int) -> None:
    assert murmur2(data) == expected


@pytest.mark.parametrize(("key", "expected"), LIBRDKAFKA_VECTORS)
def test_librdkafka_vectors(key: str, expected: int) -> None:
    assert murmur2(key.encode()) == _signed(expected)


def test_result_is_a_java_int() -> None:
    for i in range(2000):
        h = murmur2(f"player-{i:06d}".encode())
        assert -(1 << 31) <= h < (1 << 31)


def test_to_positive_clears_the_sign_bit_only() -> None:
    assert to_positive(-973932308) == -973932308 & 0x7FFFFFFF == 1173551340
    assert to_positive(-(1 << 31)) == 0  # abs() would overflow in Java; Kafka masks instead
    assert to_positive(-1) == 0x7FFFFFFF
    assert to_positive(42) == 42


def test_partition_for_matches_the_java_formula() -> None:
    for data, h in JAVA_VECTORS:
        for n in (1, 3, 4, 12, 100):
            assert partition_for(data, n) == (h & 0x7FFFFFFF) % n
    # "21": toPositive(-973932308) = 1173551340
    assert [partition_for("21", n) for n in (2, 3, 4, 7)] == [0, 0, 0, 1173551340 % 7]


def test_str_keys_hash_as_utf8() -> None:
    for key in ("player-000123", "spieler-ü", "игрок", "🎮"):
        assert partition_for(key, 8) == partition_for(key.encode("utf-8"), 8)
    assert murmur2(bytearray(b"kafka")) == murmur2(b"kafka")


def test_spread_over_partitions_is_roughly_even() -> None:
    counts = [0] * 4
    for i in range(4000):
        counts[partition_for(f"player-{i:06d}", 4)] += 1
    assert min(counts) > 850 and max(counts) < 1150


@pytest.mark.parametrize("bad", [0, -1])
def test_partition_count_must_be_positive(bad: int) -> None:
    with pytest.raises(ValueError, match="partitions must be positive"):
        partition_for("k", bad)
