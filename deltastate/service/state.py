"""What every request of one app shares: settings, options, the snapshot pool, the reads, the
freshness tracker and the metrics; and `reading()`, the one path every store read goes through
(resolve the snapshot, overlay fresh changelog rows, check max_staleness, then read)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta

from deltastate.changelog.layout import KEY
from deltastate.config import Settings
from deltastate.query.deltalog import DeltaLog
from deltastate.query.errors import ParameterError
from deltastate.query.fresh import Overlay, build_overlay
from deltastate.query.latest import LatestPosition, apply_latest, check_latest_supported, committed_offsets
from deltastate.query.reader import Snapshot
from deltastate.query.reads import Queries
from deltastate.query.tail import SourceTail
from deltastate.query.times import parse_time
from deltastate.service.freshness import Freshness, FreshnessTracker, check_max_staleness
from deltastate.service.metrics import ServiceMetrics
from deltastate.service.options import ServiceOptions
from deltastate.service.snapshots import SnapshotPool
from deltastate.stores.definition import StoreDefinition
from deltastate.stores.versions import check_servable

EPOCH = datetime(1970, 1, 1)  # naive UTC, like the snapshot's published_at


@dataclass(frozen=True)
class ReadOptions:
    """The parameters every read accepts. consistency: snapshot (the published snapshot), committed
    (plus the changelog commits after it; fresh=true), latest (plus the source records the stream
    has not committed yet; key-value point reads)."""

    max_staleness: float | None = None
    consistency: str = "snapshot"
    as_of_version: int | None = None
    as_of: str | None = None
    asked_by: str = "consistency"
    schema_version: int | None = None  # answer in this value schema version's shape (an older client)  # the parameter the caller set it with (fresh=true or consistency=), for errors

    @property
    def fresh(self) -> bool:
        return self.consistency != "snapshot"


@dataclass(frozen=True)
class LatestView:
    """What a latest read folds on top of the committed answer: per store, the stream's committed
    offsets (read before the changelog commits) and the tail of its topic."""

    offsets: dict[str, dict[int, int]]
    tails: dict[str, SourceTail]
    max_value_bytes: int

    def get_many(self, queries: Queries, store: str, keys: list[str]) -> tuple[list[dict], LatestPosition]:
        definition = queries.store(store)
        committed = {row[KEY]: row for row in queries.get_many(store, keys).rows}
        tail = self.tails[store]
        return apply_latest(definition, keys, committed, self.offsets[store], tail.snapshot, tail.partitions,
                            self.max_value_bytes)


@dataclass(frozen=True)
class Reading:
    snapshot: Snapshot
    queries: Queries
    freshness: Freshness
    latest: LatestView | None = None
    schema_version: int | None = None  # asked for; None: the version the snapshot holds


class ServiceState:
    def __init__(self, settings: Settings, options: ServiceOptions) -> None:
        self.settings = settings
        self.options = options
        self.deltalog = DeltaLog(ttl=options.staleness_cache_s)
        # Latest reads read the audit, then the changelog, each as it is now (query/latest.py).
        self.uncached_log = DeltaLog(ttl=0.0)
        self.freshness = FreshnessTracker(settings, self.deltalog,
                                          lambda snap, store: self.queries.at(snap).store(store).storage)
        self.metrics = ServiceMetrics(self._published_at, self._version)
        self.pool = SnapshotPool(settings, on_swap=self._swapped)
        self.queries = Queries(settings)  # only its store-definition cache is used: reads go through at()
        self._tails: dict[str, SourceTail] = {}
        self._tails_lock = threading.Lock()
        # (snapshot version, store) -> its newest overlay: reads between two commits share it, and the
        # next commit extends it instead of reading the changelog's tail again.
        self._overlays: dict[tuple[int, str], Overlay] = {}
        self._overlays_lock = threading.Lock()

    def _swapped(self, new: int, old: int | None) -> None:
        if old is not None:  # opening the first snapshot is not a swap
            self.metrics.swaps.inc()

    def _published_at(self) -> datetime | None:
        return self.pool.current_published_at()

    def _version(self) -> int | None:
        return self.pool.current_version()

    def _version_for(self, options: ReadOptions) -> int | None:
        if options.as_of_version is not None and options.as_of is not None:
            raise ParameterError("as_of", "give as_of or as_of_version, not both")
        if options.fresh and (options.as_of_version is not None or options.as_of is not None):
            raise ParameterError(options.asked_by, f"consistency={options.consistency} reads the newest commits; "
                                                   "it cannot be combined with as_of")
        if options.as_of_version is not None:
            return options.as_of_version
        if options.as_of is not None:
            ms = parse_time(options.as_of, "as_of")
            return self.pool.version_as_of(EPOCH + timedelta(milliseconds=ms))
        return None

    @contextmanager
    def reading(self, stores: list[str], options: ReadOptions) -> Iterator[Reading]:
        """A leased snapshot for one request, with the reads pinned to it; stores: what the answer
        covers (their definitions are checked first, so an unknown store is a 404 whatever else)."""
        definitions = [self.queries.store(s) for s in stores]
        version = self._version_for(options)
        offsets = {}
        if options.consistency == "latest":
            for definition in definitions:
                check_latest_supported(definition)
                # Before the changelog commits: see query/latest.py.
                offsets[definition.name] = committed_offsets(self.settings, self.uncached_log, definition)
        with self.pool.lease(version) as snap:
            # The snapshot's own version of each store (a migration switches versions between snapshots).
            definitions = [self.queries.at(snap).store(s) for s in stores]
            overlays, fresh_to = {}, None
            if options.fresh:
                for definition in definitions:
                    if definition.name not in snap.stores:
                        continue  # the read itself reports the store missing from the snapshot
                    overlay = self._overlay(snap, definition, options.consistency == "latest")
                    if overlay.rows is not None:
                        overlays[definition.name] = overlay
                    fresh_to = overlay.to_version if fresh_to is None or overlay.to_version is None \
                        else max(fresh_to, overlay.to_version)
            freshness = self.freshness.of(snap, stores or sorted(snap.stores), fresh_to)
            if options.fresh and freshness.fresh_to_version is None:
                freshness = Freshness(freshness.snapshot_version, freshness.published_at, 0.0,
                                      freshness.changelog_version, freshness.newest_changelog_version)
            check_max_staleness(freshness, options.max_staleness, stores[0] if len(stores) == 1 else None)
            latest = None
            if options.consistency == "latest":
                tails = {d.name: self._tail(d, offsets[d.name]) for d in definitions}
                for name, tail in tails.items():
                    tail.trim(offsets[name])
                latest = LatestView(offsets, tails, self.settings.max_value_bytes)
            for definition in definitions:
                if options.schema_version is not None:
                    try:
                        check_servable(definition, options.schema_version)
                    except ValueError as e:
                        raise ParameterError("schema_version", str(e)) from None
            yield Reading(snap, self.queries.at(snap, overlays), freshness, latest, options.schema_version)

    def _overlay(self, snap: Snapshot, definition: StoreDefinition, uncached: bool) -> Overlay:
        """The store's overlay on `snap`, shared by the reads between two changelog commits and
        extended by the next commit's files alone."""
        key = (snap.version, definition.name)
        with self._overlays_lock:
            previous = self._overlays.get(key)
        overlay = build_overlay(self.settings, self.uncached_log if uncached else self.deltalog, snap, definition,
                                previous)
        if overlay is not previous:
            with self._overlays_lock:
                if len(self._overlays) > 64:
                    self._overlays.clear()
                held = self._overlays.get(key)
                if held is None or (held.to_version or -1) <= (overlay.to_version or -1):
                    self._overlays[key] = overlay
        return overlay

    def _tail(self, definition: StoreDefinition, offsets: dict[int, int]) -> SourceTail:
        """The store's topic tail, started at the stream's committed offsets on first use, and again
        after it failed."""
        with self._tails_lock:
            tail = self._tails.get(definition.name)
            if tail is not None and tail.failed:
                tail.close()
                tail = None
            if tail is None:
                tail = SourceTail(self.settings.kafka_bootstrap, definition.source.topic,
                                  {p: hi + 1 for p, hi in offsets.items()})
                self._tails[definition.name] = tail
            return tail

    def close(self) -> None:
        self.pool.close()
        with self._tails_lock:
            for tail in self._tails.values():
                tail.close()
            self._tails.clear()


__all__ = ["LatestView", "ReadOptions", "Reading", "ServiceState"]
