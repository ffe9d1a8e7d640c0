"""Against a real broker: librdkafka with murmur2_random puts every key where partition_for says,
all records arrive in order per partition, topics are created once and mismatches are refused."""

from __future__ import annotations

import json
import time
import uuid
from collections import defaultdict
from pathlib import Path

import pytest
from click.testing import CliRunner
from confluent_kafka import Consumer, TopicPartition
from support.local_infra import free_port

from deltastate.cli.produce_cmd import produce
from deltastate.config import Settings, load_settings
from deltastate.ingest.generators import encode, leaderboard_events
from deltastate.ingest.partitioner import partition_for
from deltastate.ingest.producer import (
    ProduceError,
    TopicMismatchError,
    ensure_topic,
    produce_records,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

@pytest.fixture()
def settings(make_settings, broker: str) -> Settings:
    """The session's real broker, and a private home for anything a test writes."""
    settings = make_settings()
    assert settings.kafka_bootstrap == broker
    return settings


def consume_all(bootstrap: str, topic: str, partitions: int, expected: int,
                timeout: float = 60) -> dict[int, list[tuple[bytes | None, bytes | None]]]:
    """Every record of topic, per partition in offset order, read by assignment (no group wait)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    got: dict[int, list[tuple[bytes | None, bytes | None]]] = defaultdict(list)
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        deadline = time.monotonic() + timeout
        count = 0
        while count < expected and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=10_000, timeout=1.0):
                assert msg.error() is None, msg.error()
                got[msg.partition()].append((msg.key(), msg.value()))
                count += 1
        # Anything beyond `expected` would be a duplicate: give it a moment to show up.
        for msg in consumer.consume(num_messages=100, timeout=1.0):
            got[msg.partition()].append((msg.key(), msg.value()))
    finally:
        consumer.close()
    return got


def test_leaderboard_records_land_where_partition_for_says(settings: Settings) -> None:
    bootstrap, topic, partitions = settings.kafka_bootstrap, f"lb-{uuid.uuid4().hex[:8]}", 4
    assert ensure_topic(bootstrap, topic, partitions) is True
    generated = list(leaderboard_events(2_000, 300, seed=7, tombstones=0.05))
    records = [(key.encode(), None if event is None else encode(event)) for key, event in generated]
    result = produce_records(bootstrap, topic, records)
    tombstones = sum(1 for _, event in generated if event is None)
    assert (result.sent, result.delivered, result.failed, result.tombstones) == (2_000, 2_000, 0, tombstones)
    assert tombstones > 0

    got = consume_all(bootstrap, topic, partitions, 2_000)
    assert sum(len(v) for v in got.values()) == 2_000
    assert len(got) == partitions  # 300 skewed players still reach every partition
    for partition, rows in got.items():
        for key, _ in rows:
            assert key is not None and partition_for(key, partitions) == partition, (key, partition)
        expected = [(k, e) for k, e in generated if partition_for(k, partitions) == partition]
        decoded = [(key.decode(), None if value is None else json.loads(value)) for key, value in rows]
        assert decoded == expected  # same records, same order within the partition


def test_awkward_keys_partition_like_java(settings: Settings) -> None:
    """Unicode, long, short and odd-length keys exercise every murmur2 tail and block path."""
    bootstrap, topic, partitions = settings.kafka_bootstrap, f"keys-{uuid.uuid4().hex[:8]}", 7
    ensure_topic(bootstrap, topic, partitions)
    keys = ["a", "ab", "abc", "abcd", "игрок-1", "spieler-ü", "🎮🎲", "x" * 1001, "kafka", "21"]
    keys += [f"k{i}" for i in range(200)]
    produce_records(bootstrap, topic, ((k.encode(), b"v") for k in keys))
    got = consume_all(bootstrap, topic, partitions, len(keys))
    placed = {key.decode(): p for p, rows in got.items() for key, _ in rows if key is not None}
    assert placed == {k: partition_for(k, partitions) for k in keys}


def test_ensure_topic_is_idempotent_and_refuses_other_partition_counts(settings: Settings) -> None:
    bootstrap, topic = settings.kafka_bootstrap, f"ens-{uuid.uuid4().hex[:8]}"
    assert ensure_topic(bootstrap, topic, 3) is True
    assert ensure_topic(bootstrap, topic, 3) is False
    with pytest.raises(TopicMismatchError, match=rf"topic '{topic}' exists with 3 partitions, but 5 are expected"):
        ensure_topic(bootstrap, topic, 5)


def test_undeliverable_records_raise_with_the_reason(settings: Settings) -> None:
    bootstrap, topic = settings.kafka_bootstrap, f"big-{uuid.uuid4().hex[:8]}"
    ensure_topic(bootstrap, topic, 1)
    big = b"x" * 1_500_000
    # Refused by librdkafka itself (over its message.max.bytes): counted, the rest still goes.
    with pytest.raises(ProduceError, match=r"1 of 3 records .* not delivered: record 1: .*too large") as local:
        produce_records(bootstrap, topic, [(b"a", b"1"), (b"b", big), (b"c", b"3")])
    assert (local.value.result.delivered, local.value.result.failed) == (2, 1)
    # Accepted locally, refused by the broker (over its 1 MiB limit): reported by the delivery callback.
    with pytest.raises(ProduceError, match=r"1 of 2 records .* not delivered: partition 0: .*[Tt]oo [Ll]arge") as remote:
        produce_records(bootstrap, topic, [(b"d", big), (b"e", b"5")],
                        config={"message.max.bytes": 4_000_000, "compression.type": "none"})
    assert (remote.value.result.delivered, remote.value.result.failed) == (1, 1)


def test_cli_produces_to_the_store_topic(settings: Settings) -> None:
    topic = f"cli-{uuid.uuid4().hex[:8]}"
    runner = CliRunner()
    result = runner.invoke(produce, ["leaderboard", "--events", "5000", "--players", "100", "--seed", "3",
                                     "--tombstones", "0.1", "--topic", topic], obj=settings)
    assert result.exit_code == 0, result.output
    summary = result.stdout.strip().splitlines()[-1]
    assert summary.startswith("produced 5000 records (") and f"tombstones) to {topic} in " in summary
    assert "records/s)" in summary
    assert "created topic" in result.stderr and "(50%)" in result.stderr
    got = consume_all(settings.kafka_bootstrap, topic, 4, 5_000)  # player_stats: 4 partitions
    assert sum(len(v) for v in got.values()) == 5_000
    tombstones = sum(1 for rows in got.values() for _, value in rows if value is None)
    assert f"({tombstones} tombstones)" in summary

    again = runner.invoke(produce, ["leaderboard", "-n", "10", "--topic", topic, "--partitions", "6"], obj=settings)
    assert again.exit_code == 2 and "exists with 4 partitions, but 6 are expected" in again.stderr


def test_unreachable_broker_is_a_clear_error(tmp_path: Path) -> None:
    env = {"DELTASTATE_HOME": str(tmp_path), "KAFKA_BOOTSTRAP": f"127.0.0.1:{free_port()}"}
    result = CliRunner().invoke(produce, ["leaderboard", "-n", "10"], obj=load_settings(env))
    assert result.exit_code == 2
    assert "cannot reach Kafka" in result.stderr and "deltastate infra up" in result.stderr
