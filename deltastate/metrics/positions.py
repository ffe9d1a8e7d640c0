"""The source topic as the broker sees it: each partition's end offset (for consumer lag) and the
produce time of a given record (for end-to-end latency on Kafka's clock). One consumer per run,
never subscribed and never committing: it reads positions, it does not join the store's group."""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime

from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, TopicPartition

from deltastate.infra.topics import TopicWatch

log = logging.getLogger(__name__)


def lag(end: int, committed: int) -> int:
    """Records between the committed position and the partition's end (never negative: the end is
    read after the position, and a deleted topic's end can fall behind)."""
    return max(0, end - committed)


class TopicPositions:
    def __init__(self, bootstrap: str, topic: str, timeout: float = 5.0) -> None:
        self.topic = topic
        self.timeout = timeout
        self._watch = TopicWatch(bootstrap, "metrics", timeout)

    def partitions(self) -> list[int]:
        return self._watch.partitions(self.topic)

    def end_offsets(self) -> dict[int, int]:
        return self._watch.end_offsets(self.topic)

    def produce_times(self, offsets: dict[int, int]) -> dict[int, datetime]:
        """partition -> the broker timestamp of the record at that offset (partitions whose record
        has none, or is gone, are left out)."""
        if not offsets:
            return {}
        found: dict[int, datetime | None] = {}
        with self._watch.lock:
            self._watch.consumer.assign([TopicPartition(self.topic, p, o) for p, o in offsets.items()])
            deadline = time.monotonic() + self.timeout
            try:
                # Each partition's first message is the one asked for; stop as soon as all are in.
                while len(found) < len(offsets) and time.monotonic() < deadline:
                    for msg in self._watch.consumer.consume(num_messages=100, timeout=0.2):
                        p = msg.partition()
                        if msg.error() or p in found or msg.offset() != offsets.get(p):
                            continue
                        kind, millis = msg.timestamp()
                        found[p] = (None if kind == TIMESTAMP_NOT_AVAILABLE else
                                    datetime.fromtimestamp(millis / 1000, tz=UTC))
            finally:
                self._watch.consumer.unassign()
        return {p: t for p, t in found.items() if t is not None}

    def close(self) -> None:
        with self._watch.lock:
            try:
                self._watch.consumer.close()
            except RuntimeError:
                log.debug("metrics consumer already closed")
