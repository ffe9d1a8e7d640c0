"""Interactive reads over a snapshot, in one object: get, top, rank, range, all, window and session
fetches, and SQL.

Every read returns a QueryResult (result.py): plain Python rows and the version of the snapshot that
served them. The CLI and the REST service call these same functions. Queries puts together the reads
the read index answers (indexed.py: key lookups and the leaderboard) and the ordered scans DuckDB
answers (scans.py: key ranges, windows, sessions); each module defines its reads' orderings, which
are total, so results are deterministic.

A Queries object resolves the current snapshot for each read; `at(snapshot)` pins one snapshot
(the service leases one per request) and may overlay changelog rows newer than it (fresh reads).
`scoped(partitions)` narrows the reads to the rows of some source partitions: an instance of a query
tier answers its share of a scattered read that way (service/tier/), and the parts merge into the
answer over every partition. What a read selects from under an overlay and a scope is source.py's.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from deltastate.query.guard import check_read_only
from deltastate.query.indexed import IndexedReads
from deltastate.query.reader import Snapshot
from deltastate.query.result import QueryResult, run, run_at_most
from deltastate.query.scans import ScanReads

if TYPE_CHECKING:
    from deltastate.query.fresh import Overlay


class _Pinned:
    """A reader that always hands out one snapshot (Queries.at)."""

    def __init__(self, snap: Snapshot) -> None:
        self._snap = snap
        self.pinned = snap

    @contextmanager
    def snapshot(self) -> Iterator[Snapshot]:
        yield self._snap

    def close(self) -> None:  # the owner of the snapshot closes it
        pass


class Queries(IndexedReads, ScanReads):
    """The reads. One instance may serve many threads."""

    def at(self, snap: Snapshot, overlays: dict[str, Overlay] | None = None) -> Queries:
        """These reads pinned to one open snapshot; overlays: per store, changelog rows committed after
        it (the snapshot's columns plus `op`, latest per store key) that replace or delete its rows,
        and for window and session stores the retention horizon they move (query/fresh.py)."""
        return Queries(self.settings, _Pinned(snap), self._definitions, overlays,  # type: ignore[arg-type]
                       self.partitions)

    def scoped(self, partitions: frozenset[int] | None) -> Queries:
        """These reads over the rows of these source partitions only (None: all of them)."""
        return Queries(self.settings, self.reader, self._definitions, self._overlays, partitions)

    def close(self) -> None:
        self.reader.close()

    def __enter__(self) -> Queries:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def sql(self, query: str, max_rows: int | None = None) -> QueryResult:
        """One read-only statement over the snapshot (tables: the stores, _snapshot, _snapshot_stores).
        max_rows: refuse (SqlLimitError) rather than truncate an answer with more rows."""
        statement = check_read_only(query)
        with self.reader.snapshot() as snap:
            if max_rows is None:
                return run(snap, statement)
            return run_at_most(snap, statement, max_rows)


__all__ = ["Queries"]
