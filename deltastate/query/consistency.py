"""Reads at a consistency level and a value schema version: the one reader API the CLI and the REST
service both call.

`ConsistentReads.reading()` pins a snapshot and hands back the reads (Queries) answering from it:
  * snapshot: the snapshot alone;
  * committed: plus the changelog commits after it (query/fresh.py overlays, shared by the reads
    between two commits and extended by the next commit's files alone);
  * latest (key-value point reads): plus the source records the stream has not committed yet,
    folded on top (query/latest.py); the stream's committed offsets are read before the changelog.
A schema version asked for is checked against the versions the snapshot's store serves, and
`shape_row()` converts rows down to it. Heavy modules (Delta log reads, the Kafka tail) are imported
only by the consistency that needs them, so a snapshot read stays cheap to start.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from deltastate.changelog.layout import KEY
from deltastate.config import Settings
from deltastate.query.errors import ParameterError
from deltastate.query.reads import Queries
from deltastate.stores.definition import StoreDefinition

if TYPE_CHECKING:
    from deltastate.changelog.deltalog import DeltaLog
    from deltastate.query.fresh import Overlay
    from deltastate.query.latest import LatestPosition
    from deltastate.query.reader import Snapshot
    from deltastate.query.tail import SourceTail

CONSISTENCIES = ("snapshot", "committed", "latest")
TAIL_CATCH_UP_S = 30.0


def check_consistency(consistency: str, point_read: bool, parameter: str = "consistency") -> None:
    """Refuse a consistency level the read cannot answer at (latest: key-value point reads only)."""
    if consistency not in CONSISTENCIES:
        raise ParameterError(parameter, f"one of {', '.join(CONSISTENCIES)}, got {consistency!r}")
    if consistency == "latest" and not point_read:
        raise ParameterError(parameter, "latest applies to point reads (get, keys:batchGet); "
                                        "use snapshot or committed here")


def check_schema_version(definition: StoreDefinition, version: int | None) -> None:
    """A schema version the store cannot answer in is a bad parameter, naming the versions it can."""
    if version is None:
        return
    from deltastate.stores.versions import check_servable

    try:
        check_servable(definition, version)
    except ValueError as e:
        raise ParameterError("schema_version", str(e)) from None


def served_version(definition: StoreDefinition, asked: int | None) -> int:
    return definition.value_version if asked is None else asked


def shape_row(definition: StoreDefinition, row: dict[str, Any], served: int) -> dict[str, Any]:
    """A row of `definition`'s version in the shape of value schema version `served` (older):
    renamed fields under their old names, fields added since left out (stores/versions.py
    down_convert); the row itself when `served` is the definition's own version."""
    if served == definition.value_version:
        return row
    from deltastate.stores.versions import down_convert

    return down_convert(definition, row, served)


def shape_columns(definition: StoreDefinition, columns: Sequence[str], served: int) -> list[str]:
    """The column names of shape_row's rows."""
    return list(shape_row(definition, dict.fromkeys(columns), served))


@dataclass(frozen=True)
class LatestView:
    """What a latest read folds on top of the committed answer: per store, the stream's committed
    offsets (read before the changelog commits) and the tail of its topic."""

    offsets: dict[str, dict[int, int]]
    tails: dict[str, SourceTail]
    max_value_bytes: int

    def get_many(self, queries: Queries, store: str, keys: list[str]) -> tuple[list[dict], LatestPosition]:
        from deltastate.query.latest import apply_latest

        definition = queries.store(store)
        committed = {row[KEY]: row for row in queries.get_many(store, keys).rows}
        tail = self.tails[store]
        return apply_latest(definition, keys, committed, self.offsets[store], tail.snapshot, tail.partitions,
                            self.max_value_bytes)

    def read_to_end(self, bootstrap: str, store: str, timeout: float = TAIL_CATCH_UP_S) -> None:
        """Wait until the store's tail holds every record in its topic now (a one-shot reader, which
        has no running tail, reads the topic up to its end once)."""
        from deltastate.query.errors import FreshReadError
        from deltastate.query.tail import topic_ends

        tail = self.tails[store]
        ends = topic_ends(bootstrap, tail.topic)
        if not tail.wait_for(ends, timeout=timeout):
            raise FreshReadError(f"topic {tail.topic!r}: could not read up to offsets {ends} within {timeout:g} s")


@dataclass(frozen=True)
class Pinned:
    """One read's view: the leased snapshot, the reads pinned to it (with newer changelog rows
    overlaid), the changelog version they reach, and for latest reads the uncommitted records."""

    snapshot: Snapshot
    queries: Queries
    fresh_to: int | None
    latest: LatestView | None
    schema_version: int | None


Lease = Callable[[], AbstractContextManager["Snapshot"]]


class ConsistentReads:
    """The overlays and topic tails reads at committed and latest consistency share. Thread-safe."""

    def __init__(self, settings: Settings, staleness_cache_s: float = 0.0, tail_on_demand: bool = False) -> None:
        self.settings = settings
        self._staleness_cache_s = staleness_cache_s
        # An instance of a query tier tails the partitions it answers for, not the whole topic.
        self._tail_on_demand = tail_on_demand
        self._logs: tuple[DeltaLog, DeltaLog] | None = None
        self._logs_lock = threading.Lock()
        self._tails: dict[str, SourceTail] = {}
        self._tails_lock = threading.Lock()
        # (snapshot version, store) -> its newest overlay: reads between two commits share it, and the
        # next commit extends it instead of reading the changelog's tail again.
        self._overlays: dict[tuple[int, str], Overlay] = {}
        self._building: dict[tuple[int, str], threading.Lock] = {}
        self._overlays_lock = threading.Lock()

    @property
    def deltalog(self) -> DeltaLog:
        """Delta log reads, reused for the staleness cache's seconds."""
        return self._delta_logs()[0]

    @property
    def uncached_log(self) -> DeltaLog:
        """Delta log reads as the log is now: latest reads read the audit, then the changelog."""
        return self._delta_logs()[1]

    def _delta_logs(self) -> tuple[DeltaLog, DeltaLog]:
        with self._logs_lock:
            if self._logs is None:
                from deltastate.changelog.deltalog import DeltaLog

                self._logs = (DeltaLog(ttl=self._staleness_cache_s), DeltaLog(ttl=0.0))
            return self._logs

    @contextmanager
    def reading(self, queries: Queries, lease: Lease, stores: Sequence[str], consistency: str = "snapshot",
                schema_version: int | None = None) -> Iterator[Pinned]:
        """A leased snapshot with `queries` pinned to it at `consistency`. stores: what the answer
        covers; their definitions are checked first, so an unknown store is refused whatever else."""
        check_consistency(consistency, point_read=True)
        definitions = [queries.store(s) for s in stores]
        offsets: dict[str, dict[int, int]] = {}
        if consistency == "latest":
            from deltastate.changelog.intake import committed_offsets
            from deltastate.query.latest import check_latest_supported

            for definition in definitions:
                check_latest_supported(definition)
                # Before the changelog commits: see query/latest.py.
                offsets[definition.name] = committed_offsets(self.settings, self.uncached_log, definition)
        with lease() as snap:
            # The snapshot's own version of each store (a migration switches versions between snapshots).
            definitions = [queries.at(snap).store(s) for s in stores]
            overlays: dict[str, Overlay] = {}
            fresh_to = None
            if consistency != "snapshot":
                for definition in definitions:
                    if definition.name not in snap.stores:
                        continue  # the read itself reports the store missing from the snapshot
                    overlay = self._overlay(snap, definition, consistency == "latest")
                    if overlay.rows is not None:
                        overlays[definition.name] = overlay
                    fresh_to = overlay.to_version if fresh_to is None or overlay.to_version is None \
                        else max(fresh_to, overlay.to_version)
            for definition in definitions:
                check_schema_version(definition, schema_version)
            latest = None
            if consistency == "latest":
                tails = {d.name: self._tail(d, offsets[d.name]) for d in definitions}
                for name, tail in tails.items():
                    tail.trim(offsets[name])
                latest = LatestView(offsets, tails, self.settings.max_value_bytes)
            yield Pinned(snap, queries.at(snap, overlays), fresh_to, latest, schema_version)

    def merged_to(self, snapshot_version: int, store: str) -> int | None:
        """The changelog version up to which the store's commits are merged over that snapshot (None:
        no committed read or follow has merged any yet)."""
        with self._overlays_lock:
            overlay = self._overlays.get((snapshot_version, store))
        return None if overlay is None else overlay.to_version

    def follow(self, queries: Queries, lease: Lease) -> list[str]:
        """Bring the overlay of every store in the leased snapshot up to the newest changelog commit,
        so that a committed read finds the commits already merged (the first read after a start or a
        swap would otherwise read every commit since the publish). Returns one message per store
        that could not be followed: its reads report the same error themselves."""
        from deltastate.stores.backends import backend_of

        failures = []
        with lease() as snap:
            for name in sorted(snap.stores):
                try:
                    definition = queries.at(snap).store(name)
                    if backend_of(definition).fresh_refusal(definition) is None:
                        self._overlay(snap, definition, False)
                except Exception as exc:  # noqa: BLE001 (reported by the store's own reads)
                    failures.append(f"store {name!r}: {exc}")
        return failures

    def _overlay(self, snap: Snapshot, definition: StoreDefinition, uncached: bool) -> Overlay:
        """The store's overlay on `snap`, shared by the reads between two changelog commits and
        extended by the next commit's files alone."""
        from deltastate.query.fresh import build_overlay

        key = (snap.version, definition.name)
        with self._overlays_lock:
            building = self._building.setdefault(key, threading.Lock())
        # One build per store and snapshot at a time: the reads that find the same new commit wait for
        # the first one's merge and share it, rather than each merging it again.
        with building:
            with self._overlays_lock:
                previous = self._overlays.get(key)
            overlay = build_overlay(self.settings, self.uncached_log if uncached else self.deltalog, snap, definition,
                                    previous)
            if overlay is not previous:
                with self._overlays_lock:
                    if len(self._overlays) > 64:
                        self._overlays.clear()
                        self._building = {key: building}
                    held = self._overlays.get(key)
                    if held is None or (held.to_version or -1) <= (overlay.to_version or -1):
                        self._overlays[key] = overlay
        return overlay

    def _tail(self, definition: StoreDefinition, offsets: dict[int, int]) -> SourceTail:
        """The store's topic tail, started at the stream's committed offsets on first use, and again
        after it failed."""
        from deltastate.query.tail import SourceTail

        with self._tails_lock:
            tail = self._tails.get(definition.name)
            if tail is not None and tail.failed:
                tail.close()
                tail = None
            if tail is None:
                tail = SourceTail(self.settings.kafka_bootstrap, definition.source.topic,
                                  {p: hi + 1 for p, hi in offsets.items()}, on_demand=self._tail_on_demand)
                self._tails[definition.name] = tail
            return tail

    def close(self) -> None:
        with self._tails_lock:
            for tail in self._tails.values():
                tail.close()
            self._tails.clear()


__all__ = ["CONSISTENCIES", "ConsistentReads", "LatestView", "Pinned", "check_consistency", "check_schema_version",
           "served_version", "shape_columns", "shape_row"]
