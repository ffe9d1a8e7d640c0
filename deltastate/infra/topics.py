"""Topic positions as the broker sees them: which partitions a topic has and where each begins and
ends (its watermarks). The one place deltastate asks Kafka for them: the run (how many partitions
to name when resuming from offsets), consumer-lag metrics, fresh and latest reads (where the topic
ends), quality checks (which records are newest).

A TopicWatch is a consumer that is never subscribed and never commits: it reads positions, it does
not join any consumer group's assignment. confluent-kafka consumers are not thread-safe, so every
call holds the watch's lock. Readers that keep a consumer of their own for reading records (the
latest-read tail, store pages, quality checks) ask it through `partitions_of` and `watermarks_of`.
"""

from __future__ import annotations

import threading
import uuid
from types import TracebackType

from confluent_kafka import Consumer, TopicPartition


def partitions_of(consumer: Consumer, topic: str, timeout: float) -> list[int]:
    """The topic's partitions; [] when the broker does not have the topic."""
    meta = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
    return sorted(meta.partitions) if meta is not None and meta.error is None else []


def watermarks_of(consumer: Consumer, topic: str, partition: int, timeout: float) -> tuple[int, int]:
    """(low, high): the partition's first offset still held and the offset its next record gets,
    asked of the broker (not a cached figure)."""
    low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout, cached=False)
    return int(low), int(high)


class TopicWatch:
    def __init__(self, bootstrap: str, purpose: str, timeout: float = 10.0) -> None:
        self.timeout = timeout
        self.lock = threading.Lock()
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"deltastate-{purpose}-{uuid.uuid4().hex[:8]}",
                                  "enable.auto.commit": False, "enable.partition.eof": False, "log_level": 2})

    def partitions(self, topic: str) -> list[int]:
        """The topic's partitions; [] when the broker does not have the topic."""
        with self.lock:
            return partitions_of(self.consumer, topic, self.timeout)

    def watermarks(self, topic: str, partition: int) -> tuple[int, int]:
        """(low, high): the partition's first offset still held and the offset its next record gets."""
        with self.lock:
            return watermarks_of(self.consumer, topic, partition, self.timeout)

    def end_offsets(self, topic: str) -> dict[int, int]:
        """partition -> its high watermark, for every partition of the topic ({} when it is missing)."""
        return {p: self.watermarks(topic, p)[1] for p in self.partitions(topic)}

    def close(self) -> None:
        with self.lock:
            self.consumer.close()

    def __enter__(self) -> TopicWatch:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


def partition_count(bootstrap: str, topic: str, timeout: float = 30.0) -> int | None:
    """How many partitions the topic has; None when the broker does not have it."""
    with TopicWatch(bootstrap, "partitions", timeout) as watch:
        return len(watch.partitions(topic)) or None


def end_offsets(bootstrap: str, topic: str, timeout: float = 10.0) -> dict[int, int]:
    """partition -> the offset the next record produced to it will get; {} when the topic is missing."""
    with TopicWatch(bootstrap, "ends", timeout) as watch:
        return watch.end_offsets(topic)
