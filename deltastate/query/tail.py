"""The records of a store's source topic that its stream has not committed yet.

Reads at `consistency=latest` fold these into the committed answer. A service keeps one SourceTail
per store: a consumer thread, assigned to every partition of the topic (no consumer group, nothing
committed to Kafka), that holds each record from the stream's committed position on, so a read
costs no broker round trip and sees a record a few milliseconds after it is acknowledged. What the
stream has committed since is trimmed as reads report it. A one-off reader (the CLI) waits until
the tail holds everything produced before it asked (`topic_ends`, `wait_for`).

An instance of a query tier answers latest reads for its own partitions only (the others are
forwarded), so its tail holds a partition from the first read of it on (`on_demand`): that read
waits until the tail has caught up with the partition's end as it was when asked.
"""

from __future__ import annotations

import bisect
import threading
import time
import uuid
from dataclasses import dataclass

from deltastate.query.errors import FreshReadError

Record = tuple[int, bytes | None, bytes | None]  # offset, key, value

# Records a tail holds at most, over all partitions: a stream this far behind is not "latest" anymore.
MAX_RECORDS = 2_000_000


def _consumer(bootstrap: str):
    from confluent_kafka import Consumer

    return Consumer({"bootstrap.servers": bootstrap, "group.id": f"deltastate-tail-{uuid.uuid4().hex[:8]}",
                     "enable.auto.commit": False, "enable.partition.eof": False, "auto.offset.reset": "earliest",
                     "fetch.wait.max.ms": 10, "fetch.min.bytes": 1, "log_level": 2})


def topic_partition_count(consumer, topic: str, timeout: float = 10.0) -> int:
    from deltastate.infra.topics import partitions_of

    partitions = partitions_of(consumer, topic, timeout)
    if not partitions:
        raise LookupError(f"topic {topic!r} is not on the broker")
    return len(partitions)


@dataclass
class _Partition:
    offsets: list[int]
    records: list[Record]
    consumed: int  # the highest offset read, or start - 1


class SourceTail:
    """A background reader of `topic` from `start` (partition -> first offset to hold; a partition
    not named starts at its beginning): of every partition, or with on_demand of each partition
    from the first read of it on."""

    def __init__(self, bootstrap: str, topic: str, start: dict[int, int], on_demand: bool = False) -> None:
        self.topic = topic
        self._start = dict(start)
        self._consumer = _consumer(bootstrap)
        self.partitions = topic_partition_count(self._consumer, topic)
        self._parts: dict[int, _Partition] = {}
        self._lock = threading.Lock()
        self._asked: list[int] = []  # partitions to start holding, taken up by the reader thread
        self._ends: dict[int, int] = {}  # a partition's end when it started being held
        self._stop = threading.Event()
        self._error: Exception | None = None
        if not on_demand:
            self._hold(list(range(self.partitions)), ends=False)
        self._thread = threading.Thread(target=self._run, name=f"tail-{topic}", daemon=True)
        self._thread.start()

    def _hold(self, partitions: list[int], ends: bool = True) -> None:
        """Start reading these partitions (on the reader thread, or before it starts); ends: note
        where each ends now, for the read waiting to catch up with it."""
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition

        for p in partitions if ends else ():
            self._ends[p] = self._consumer.get_watermark_offsets(TopicPartition(self.topic, p), timeout=10,
                                                                 cached=False)[1]
        with self._lock:
            for p in partitions:
                self._parts[p] = _Partition([], [], self._start.get(p, 0) - 1)
        self._consumer.incremental_assign([TopicPartition(self.topic, p, self._start.get(p, OFFSET_BEGINNING))
                                           for p in partitions])

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                with self._lock:
                    asked, self._asked = [p for p in dict.fromkeys(self._asked) if p not in self._parts], []
                if asked:
                    self._hold(asked)
                messages = self._consumer.consume(1_000, timeout=0.05)
                if not messages:
                    continue
                with self._lock:
                    for m in messages:
                        if m.error() is not None:
                            continue
                        part = self._parts[m.partition()]
                        if m.offset() <= part.consumed:
                            continue
                        part.offsets.append(m.offset())
                        part.records.append((m.offset(), m.key(), m.value()))
                        part.consumed = m.offset()
                    if sum(len(p.offsets) for p in self._parts.values()) > MAX_RECORDS:
                        raise OverflowError(f"topic {self.topic!r}: more than {MAX_RECORDS:,} records not "
                                            "committed by the stream")
        except Exception as exc:  # reported to every later read
            self._error = exc
        finally:
            self._consumer.close()

    def snapshot(self, partition: int, after: int) -> tuple[list[Record], int]:
        """The records of `partition` with offset > after, and the highest offset read so far."""
        if self._error is not None:
            raise FreshReadError(f"the reader of topic {self.topic!r} stopped ({self._error}); the next read "
                                 "starts a new one")
        if partition not in self._parts:
            self._catch_up(partition)
        with self._lock:
            part = self._parts[partition]
            i = bisect.bisect_right(part.offsets, after)
            return part.records[i:], part.consumed

    def _catch_up(self, partition: int, timeout: float = 10.0) -> None:
        """Hold `partition` from now on; return once it is read up to its end as of this call."""
        with self._lock:
            self._asked.append(partition)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self._error is None:
            with self._lock:
                part, end = self._parts.get(partition), self._ends.get(partition)
            if part is not None and end is not None and part.consumed >= end - 1:
                return
            time.sleep(0.005)
        raise FreshReadError(f"topic {self.topic!r} partition {partition}: could not read up to its end within "
                             f"{timeout:g} s" + (f" ({self._error})" if self._error else ""))

    def held(self) -> list[int]:
        """The partitions this tail reads."""
        with self._lock:
            return sorted(self._parts)

    @property
    def failed(self) -> bool:
        """The reader stopped (the broker went away, or the stream fell MAX_RECORDS behind)."""
        return self._error is not None

    def consumed(self) -> dict[int, int]:
        with self._lock:
            return {p: part.consumed for p, part in self._parts.items()}

    def trim(self, committed: dict[int, int]) -> None:
        """Forgets records at or below the stream's committed offsets."""
        with self._lock:
            for p, hi in committed.items():
                part = self._parts.get(p)
                if part is None:
                    continue
                i = bisect.bisect_right(part.offsets, hi)
                if i:
                    del part.offsets[:i], part.records[:i]

    def wait_for(self, ends: dict[int, int], timeout: float) -> bool:
        """Until every partition's records below `ends` (exclusive) are held."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            held = self.consumed()
            if all(held.get(p, -1) >= end - 1 for p, end in ends.items()):
                return True
            time.sleep(0.005)
        return False

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)


def topic_ends(bootstrap: str, topic: str, timeout: float = 10.0) -> dict[int, int]:
    """Partition -> the offset the next record produced will get (the high watermark)."""
    from deltastate.infra.topics import end_offsets

    ends = end_offsets(bootstrap, topic, timeout)
    if not ends:
        raise LookupError(f"topic {topic!r} is not on the broker")
    return ends
