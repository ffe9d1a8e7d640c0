"""A thin confluent_kafka producer that behaves like a Java client, plus topic creation.

Why Java-like: the stores are defined by Kafka Streams semantics, and Streams apps (and most
producers feeding them) are Java. librdkafka's default partitioner is consistent_random (CRC32), so
without `partitioner=murmur2_random` the same key would land on a different partition than a Java
producer puts it, and partition-local state would not line up. Idempotence with acks=all gives
exactly one copy of each record, in order per partition, even across retries, which the rebuild
tests compare against.

Why these buffer sizes: a benchmark pushes millions of small records at ~100k+/s; a 20 ms linger
and 1 MB lz4 batches keep requests few and large, and a deep local queue keeps produce() from
blocking while the broker acknowledges. Only failed deliveries get a callback
(`delivery.report.only.error`), which saves a Python call per record; after a complete flush every
record without a failure report was delivered.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from deltastate.errors import InfraError

__all__ = ["ProduceError", "ProduceResult", "TopicMismatchError", "ensure_topic", "produce_records",
           "producer_config"]

ADMIN_TIMEOUT_S = 30.0
LOOKUP_TIMEOUT_S = 10.0  # a metadata request; longer means the broker is down or unreachable
FLUSH_TIMEOUT_S = 120.0
POLL_EVERY = 1_000  # serve delivery callbacks this often even when the queue is not full
MAX_REASONS = 5


class TopicMismatchError(InfraError):
    """The topic exists with another partition count than the store expects."""

    def __init__(self, topic: str, actual: int, expected: int) -> None:
        super().__init__(
            f"topic {topic!r} exists with {actual} partitions, but {expected} are expected; keys would "
            f"land on other partitions than the store assumes. Delete and recreate the topic, or set "
            f"the store's source.partitions to {actual}")
        self.topic, self.actual, self.expected = topic, actual, expected


class ProduceError(InfraError):
    """Records were not delivered (after librdkafka's own retries); .result has the counts."""

    def __init__(self, message: str, result: ProduceResult) -> None:
        super().__init__(message)
        self.result = result


@dataclass
class ProduceResult:
    topic: str
    sent: int = 0
    delivered: int = 0
    failed: int = 0
    tombstones: int = 0
    seconds: float = 0.0
    reasons: list[str] = field(default_factory=list)

    @property
    def rate(self) -> float:
        """Delivered records per second over the whole call (flush included)."""
        return self.delivered / self.seconds if self.seconds > 0 else 0.0


def producer_config(bootstrap: str, **overrides: Any) -> dict[str, Any]:
    """librdkafka settings of a Java-compatible, throughput-oriented idempotent producer."""
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "partitioner": "murmur2_random",  # Java's key partitioner; null keys go to a random partition
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 20,
        "batch.size": 1_000_000,
        "batch.num.messages": 50_000,
        "queue.buffering.max.messages": 1_000_000,
        "queue.buffering.max.kbytes": 512 * 1024,
        "compression.type": "lz4",
        "delivery.report.only.error": True,
        "log_level": 2,  # failures surface as ProduceError, not as log spam on stderr
    }
    config.update(overrides)
    return config


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "log_level": 2})  # we raise the errors ourselves


def _partition_count(admin: AdminClient, bootstrap: str, topic: str) -> int | None:
    """Partitions of topic, None if it does not exist; a broker we cannot reach is an InfraError."""
    try:
        meta = admin.list_topics(timeout=LOOKUP_TIMEOUT_S)
    except KafkaException as exc:
        raise InfraError(f"cannot reach Kafka at {bootstrap} to look up topic {topic!r}: {exc}; "
                         f"is the broker running (`deltastate infra up`)?") from exc
    found = meta.topics.get(topic)
    if found is None or found.error is not None and found.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
        return None
    return len(found.partitions)


def ensure_topic(bootstrap: str, topic: str, partitions: int) -> bool:
    """Create topic with `partitions` partitions unless it exists; True when this call created it.

    An existing topic with another partition count is refused, since partition_for(key, n) would no
    longer say where keys are. The replication factor is the broker's default.
    """
    admin = _admin(bootstrap)
    actual = _partition_count(admin, bootstrap, topic)
    created = False
    if actual is None:
        future = admin.create_topics([NewTopic(topic, num_partitions=partitions)],
                                     operation_timeout=ADMIN_TIMEOUT_S)[topic]
        try:
            future.result(timeout=ADMIN_TIMEOUT_S)
            created = True
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            if not (isinstance(err, KafkaError) and err.code() == KafkaError.TOPIC_ALREADY_EXISTS):
                raise InfraError(f"cannot create topic {topic!r} with {partitions} partitions at {bootstrap}: {exc}") from exc
        # Wait until metadata lists every partition, so producers and consumers start cleanly.
        deadline = time.monotonic() + ADMIN_TIMEOUT_S
        while (actual := _partition_count(admin, bootstrap, topic)) is None or (created and actual < partitions):
            if time.monotonic() > deadline:
                raise InfraError(f"topic {topic!r} was created but does not show in metadata after {ADMIN_TIMEOUT_S:.0f}s")
            time.sleep(0.1)
    if actual != partitions:
        raise TopicMismatchError(topic, actual, partitions)
    return created


def produce_records(bootstrap: str, topic: str, records: Iterable[tuple[bytes | None, bytes | None]],
                    progress: Callable[[int], None] | None = None, progress_every: int = 10_000,
                    config: dict[str, Any] | None = None) -> ProduceResult:
    """Send (key, value) records to topic in order, wait for all acknowledgements, and count them.

    A None value is a tombstone. `progress(sent)` is called every `progress_every` records and once
    at the end; `config` overrides librdkafka settings of producer_config. Raises ProduceError
    naming the first failure reasons if any record was not delivered.
    """
    result = ProduceResult(topic)
    fatal: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            result.failed += 1
            if len(result.reasons) < MAX_REASONS:
                result.reasons.append(f"partition {msg.partition()}: {err.str()}")

    def on_error(err: KafkaError) -> None:
        if err.fatal():
            fatal.append(err)

    producer = Producer(producer_config(bootstrap, on_delivery=on_delivery, error_cb=on_error, **(config or {})))
    produce, poll = producer.produce, producer.poll
    started = time.monotonic()
    sent = tombstones = 0
    for key, value in records:
        while True:
            try:
                produce(topic, value, key)
                break
            except BufferError:  # local queue full: let librdkafka send and serve callbacks
                poll(0.05)
            except KafkaException as exc:  # refused locally (e.g. too large): count it, go on
                result.failed += 1
                if len(result.reasons) < MAX_REASONS:
                    result.reasons.append(f"record {sent}: {exc.args[0].str() if exc.args else exc}")
                break
        sent += 1
        if value is None:
            tombstones += 1
        if sent % POLL_EVERY == 0:
            poll(0)
            if fatal:
                break
        if progress is not None and sent % progress_every == 0:
            progress(sent)
    remaining = producer.flush(FLUSH_TIMEOUT_S)
    result.seconds = time.monotonic() - started
    result.sent, result.tombstones = sent, tombstones
    result.failed += remaining
    result.delivered = sent - result.failed
    if progress is not None and sent % progress_every != 0:
        progress(sent)
    if fatal:
        raise ProduceError(f"producer to {topic!r} at {bootstrap} hit a fatal error after {sent} records: "
                           f"{fatal[0].str()}", result)
    if result.failed:
        detail = "; ".join(result.reasons) or "not acknowledged"
        if remaining:
            detail += f"; {remaining} still unacknowledged after {FLUSH_TIMEOUT_S:.0f}s"
        raise ProduceError(f"{result.failed} of {sent} records to {topic!r} were not delivered: {detail}", result)
    return result
