"""The source tail a query tier instance keeps for latest reads, on demand: it holds a partition
from the first read of it on, caught up with everything produced before that read, and no other
partition, so an instance tails only the partitions it is asked about (a real broker, no Spark).
"""

from __future__ import annotations

import time

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]
PARTITIONS = 4


def test_an_instance_tails_only_the_partitions_it_reads(broker: str, topic: str) -> None:
    """The tail of a tier instance (on demand) holds a partition from its first read on, caught up
    with everything produced before that read, and no other partition."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from deltastate.query.tail import SourceTail

    admin = AdminClient({"bootstrap.servers": broker})
    [created] = admin.create_topics([NewTopic(topic, PARTITIONS, 1)]).values()
    created.result()
    producer = Producer({"bootstrap.servers": broker})
    sent: dict[int, list[tuple[bytes, bytes]]] = {p: [] for p in range(PARTITIONS)}

    def produce(n: int, tag: str) -> None:
        for i in range(n):
            p, key, value = i % PARTITIONS, f"k{i}".encode(), f"{tag}-{i}".encode()
            producer.produce(topic, value, key, partition=p)
            sent[p].append((key, value))
        assert producer.flush(10) == 0

    produce(40, "first")
    tail = SourceTail(broker, topic, {}, on_demand=True)
    try:
        assert tail.held() == []
        records, _ = tail.snapshot(2, -1)
        assert [(k, v) for _, k, v in records] == sent[2] and tail.held() == [2]
        produce(40, "second")
        deadline = time.monotonic() + 10
        while [(k, v) for _, k, v in tail.snapshot(2, -1)[0]] != sent[2]:
            assert time.monotonic() < deadline, "the tail did not follow partition 2"
            time.sleep(0.05)
        records, _ = tail.snapshot(0, -1)
        assert [(k, v) for _, k, v in records] == sent[0] and tail.held() == [0, 2]
    finally:
        tail.close()
