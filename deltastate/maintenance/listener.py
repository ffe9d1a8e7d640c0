"""The restore listener: how a restore reports progress (Kafka Streams' StateRestoreListener).

The CLI draws it as a progress bar, tests record it, and Airflow tasks log it. Calls arrive in
order: on_start once, on_batch once per restored slice of the state, on_end once. A slice is the
live state of one source partition (like Kafka Streams' onBatchRestored, which names the changelog
partition), so each batch says which partition it restored.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from deltastate.stores.backends import RestoreMode


class RestoreListener(Protocol):
    def on_start(self, store: str, from_changelog_version: int | None, mode: RestoreMode) -> None:
        """from_changelog_version: the changelog version whose state is restored (None: empty
        changelog). mode: "full" when the state itself is rebuilt from the changelog (key-value
        stores), "partial" when only the source offsets are (window and session stores, whose
        engine reads its state from the changelog)."""

    def on_batch(self, records_restored: int, partition: int | None) -> None:
        """records_restored: state records written by this batch (not cumulative); partition: the
        source partition whose live keys it holds (None for state rows without one)."""

    def on_end(self, total_records: int, seconds: float) -> None: ...


@dataclass
class RecordingListener:
    """Keeps every call, in order; for tests and for callers that report afterwards."""

    events: list[tuple] = field(default_factory=list)

    def on_start(self, store: str, from_changelog_version: int | None, mode: RestoreMode) -> None:
        self.events.append(("start", store, from_changelog_version, mode))

    def on_batch(self, records_restored: int, partition: int | None) -> None:
        self.events.append(("batch", records_restored, partition))

    def on_end(self, total_records: int, seconds: float) -> None:
        self.events.append(("end", total_records, seconds))

    @property
    def batches(self) -> list[int]:
        return [e[1] for e in self.events if e[0] == "batch"]

    @property
    def partitions(self) -> list[int | None]:
        return [e[2] for e in self.events if e[0] == "batch"]


class SilentListener:
    def on_start(self, store: str, from_changelog_version: int | None, mode: RestoreMode) -> None:
        pass

    def on_batch(self, records_restored: int, partition: int | None) -> None:
        pass

    def on_end(self, total_records: int, seconds: float) -> None:
        pass
