"""What every request of one app shares: settings, options, the snapshot pool, the reads, the
freshness tracker and the metrics; and `reading()`, the one path every store read goes through
(resolve the snapshot, overlay fresh changelog rows, check max_staleness, then read)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta

from deltastate.config import Settings
from deltastate.query.consistency import ConsistentReads, LatestView
from deltastate.query.errors import ParameterError
from deltastate.query.reader import Snapshot
from deltastate.query.reads import Queries
from deltastate.query.times import parse_time
from deltastate.service.follower import CommitFollower
from deltastate.service.freshness import Freshness, FreshnessTracker, check_max_staleness
from deltastate.service.metrics import ServiceMetrics
from deltastate.service.options import ServiceOptions
from deltastate.service.snapshots import SnapshotPool
from deltastate.service.tier.membership import Membership

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
    asked_by: str = "consistency"  # the parameter the caller set it with (fresh=true or consistency=), for errors
    schema_version: int | None = None  # answer in this value schema version's shape (an older client)

    @property
    def fresh(self) -> bool:
        return self.consistency != "snapshot"


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
        # Overlays of changelog commits and topic tails, shared by every request (query/consistency.py).
        self.reads = ConsistentReads(settings, options.staleness_cache_s, tail_on_demand=options.tier is not None)
        self.deltalog = self.reads.deltalog
        self.uncached_log = self.reads.uncached_log
        self.freshness = FreshnessTracker(settings, self.deltalog,
                                          lambda snap, store: self.queries.at(snap).store(store).storage)
        self.metrics = ServiceMetrics(self._published_at, self._version)
        self.pool = SnapshotPool(settings, on_swap=self._swapped)
        self.queries = Queries(settings)  # only its store-definition cache is used: reads go through at()
        # The query tier's membership when this instance is one of several (options.tier), else None.
        self.tier: Membership | None = None
        self.follower: CommitFollower | None = None

    def start(self) -> None:
        """The background work of a serving instance: the tier's membership and the commit follower."""
        if self.tier is not None:
            self.tier.start()
        if self.options.follow_commits_s > 0:
            self.follower = CommitFollower(self.reads, self.queries, self.pool.lease, self.options.follow_commits_s)
            self.follower.start()

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
        """A leased snapshot for one request, with the reads pinned to it at the options' consistency
        and schema version; stores: what the answer covers (their definitions are checked first, so
        an unknown store is a 404 whatever else). Then max_staleness is checked."""
        for store in stores:
            self.queries.store(store)
        version = self._version_for(options)
        with self.reads.reading(self.queries, lambda: self.pool.lease(version), stores, options.consistency,
                                options.schema_version) as pinned:
            snap = pinned.snapshot
            freshness = self.freshness.of(snap, stores or sorted(snap.stores), pinned.fresh_to)
            if options.fresh and freshness.fresh_to_version is None:
                freshness = Freshness(freshness.snapshot_version, freshness.published_at, 0.0,
                                      freshness.changelog_version, freshness.newest_changelog_version)
            check_max_staleness(freshness, options.max_staleness, stores[0] if len(stores) == 1 else None)
            yield Reading(snap, pinned.queries, freshness, pinned.latest, options.schema_version)

    def close(self) -> None:
        if self.follower is not None:
            self.follower.close()
        if self.tier is not None:
            self.tier.close()
        self.pool.close()
        self.reads.close()


__all__ = ["LatestView", "ReadOptions", "Reading", "ServiceState"]
