"""Key-value TTL: keys not updated for longer than the store's ttl are deleted by a Kafka tombstone.

Why through the source topic: the running key-value stream keeps its state in Spark's RocksDB store;
a tombstone written only to the changelog would leave that state holding the old value, and the
key's next event would bring it back. A Kafka tombstone (null value, key = store key, murmur2
partitioning like every deltastate producer, header deltastate-reason: ttl) reaches the stream in
offset order, so the stream itself resets the key and writes the changelog tombstone.

"Last update" is the write time of the key's latest changelog record (processing time, the time the
store last changed the key), compared with `now`.

The race, and how small it is. Cleanup decides from the changelog at version V; a record for an
expired key that the stream has not folded into V yet would be wiped by the tombstone that lands
after it. So before producing, cleanup reads every record between the highest source offset V holds
per partition and the partition's end (the stream's lag: about one trigger interval when it keeps
up) and spares keys that appear there; keys already holding a pending ttl tombstone there are
spared too, so reruns do not send duplicates. What remains is a record produced between that read
and the tombstone's append (the produce latency, milliseconds): after producing, cleanup reads that
range again and reports such keys as `raced` (their record before the tombstone was deleted with the
old value; a key idle for a whole ttl rarely gets its next event in those milliseconds).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from deltastate.ingest.producer import producer_config
from deltastate.maintenance.stats import MaintenanceError

REASON_HEADER = "deltastate-reason"
TTL_REASON = b"ttl"
SCAN_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class TailRecord:
    partition: int
    offset: int
    key: str | None
    from_cleanup: bool


def _consumer(bootstrap: str):
    from confluent_kafka import Consumer

    return Consumer({"bootstrap.servers": bootstrap, "group.id": f"deltastate-cleanup-{uuid.uuid4().hex[:8]}",
                     "enable.auto.commit": False, "auto.offset.reset": "earliest", "log_level": 2})


def scan(bootstrap: str, store: str, topic: str, ranges: dict[int, tuple[int, int]]) -> list[TailRecord]:
    """Every record with offset in [start, end) of each partition's range."""
    import time

    from confluent_kafka import TopicPartition

    wanted = {p: r for p, r in ranges.items() if r[1] > r[0]}
    if not wanted:
        return []
    consumer = _consumer(bootstrap)
    out: list[TailRecord] = []
    done: set[int] = set()
    try:
        consumer.assign([TopicPartition(topic, p, start) for p, (start, _) in wanted.items()])
        deadline = time.monotonic() + SCAN_TIMEOUT_S
        while len(done) < len(wanted):
            if time.monotonic() > deadline:
                raise MaintenanceError(store, f"reading the tail of topic {topic!r} timed out; ranges {wanted}")
            for msg in consumer.consume(num_messages=10_000, timeout=0.5):
                if msg.error() is not None:
                    continue  # partition EOF and transient errors; the offsets tell when we are done
                p, off = msg.partition(), msg.offset()
                if off < wanted[p][1]:
                    key = None if msg.key() is None else msg.key().decode("utf-8", errors="replace")
                    ttl = any(h == REASON_HEADER and v == TTL_REASON for h, v in (msg.headers() or []))
                    out.append(TailRecord(p, off, key, ttl))
                if off >= wanted[p][1] - 1:
                    done.add(p)
    finally:
        consumer.close()
    return out


def produce_tombstones(bootstrap: str, store: str, topic: str, keys: Iterable[str]) -> dict[str, tuple[int, int]]:
    """Sends one ttl tombstone per key; returns key -> (partition, offset) as the broker acknowledged."""
    from confluent_kafka import Producer

    placed: dict[str, tuple[int, int]] = {}
    errors: list[str] = []

    def on_delivery(err, msg) -> None:
        if err is not None:
            errors.append(err.str())
        else:
            placed[msg.key().decode("utf-8")] = (msg.partition(), msg.offset())

    producer = Producer(producer_config(bootstrap, **{"delivery.report.only.error": False}))
    for i, key in enumerate(keys):
        while True:
            try:
                producer.produce(topic, None, key.encode("utf-8"), headers=[(REASON_HEADER, TTL_REASON)],
                                 on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 1000 == 0:
            producer.poll(0)
    remaining = producer.flush(120)
    if errors or remaining:
        raise MaintenanceError(store, f"{len(errors) + remaining} ttl tombstones to {topic!r} were not delivered: "
                                      f"{'; '.join(errors[:3]) or 'not acknowledged'}")
    return placed


def raced_keys(tail: list[TailRecord], placed: dict[str, tuple[int, int]]) -> list[str]:
    """Keys with a record (not cleanup's) before their tombstone in the post-produce range."""
    return sorted({r.key for r in tail if not r.from_cleanup and r.key in placed
                   and r.partition == placed[r.key][0] and r.offset < placed[r.key][1]})


def spared_keys(tail: list[TailRecord]) -> set[str]:
    """Keys the unprocessed tail touches (fresh records, or a pending ttl tombstone)."""
    return {r.key for r in tail if r.key is not None}
