"""One exception root for deltastate; each package raises a small subclass whose message names the
store, key or component involved, so an operator can act on it without reading a stack trace."""

from __future__ import annotations


class DeltastateError(Exception):
    """Root of every error deltastate raises on purpose."""


class ConfigError(DeltastateError):
    """A setting or a store definition is missing or invalid."""


class StoreDefinitionError(ConfigError):
    def __init__(self, store: str, problem: str) -> None:
        super().__init__(f"store {store!r}: {problem}")
        self.store = store
        self.problem = problem


class UnknownStoreError(DeltastateError):
    def __init__(self, store: str, known: list[str]) -> None:
        super().__init__(f"unknown store {store!r}; declared stores: {', '.join(sorted(known)) or 'none'}")
        self.store = store


class InfraError(DeltastateError):
    """A local service (Java, Maven, the Kafka broker) is missing or failed."""


class SnapshotError(DeltastateError):
    """No snapshot, or a snapshot that cannot be built or read."""


class FreshReadError(SnapshotError):
    """A read past the snapshot could not read the changelog commits after it (gone, not local, or
    in a form the plain-Python log reader does not decode)."""


class QueryError(DeltastateError):
    """A read was refused (bad argument, write through read-only SQL)."""


class KeyNotFoundError(QueryError):
    def __init__(self, store: str, key: str) -> None:
        super().__init__(f"store {store!r}: key {key!r} not found")
        self.store = store
        self.key = key


class CheckpointMismatchError(DeltastateError):
    """The stream's checkpoint disagrees with the store's changelog."""


class AuditMismatchError(DeltastateError):
    """A micro-batch's counts cannot be reconciled: the stream's running totals disagree with the
    audit table, or Kafka no longer holds the records a batch must write as dead letters."""


class StreamTimeError(DeltastateError):
    """A window or session store's micro-batch cannot be timed in offset order."""

    def __init__(self, store: str, batch_id: int, partitions: list[int]) -> None:
        super().__init__(
            f"store {store!r}, batch {batch_id}: source partitions {partitions} were read by more than one "
            "task, so their stream time cannot follow offset order; the Kafka source must not split a "
            "partition (minPartitions, maxRecordsPerPartition)")
        self.store = store
        self.batch_id = batch_id
        self.partitions = partitions
