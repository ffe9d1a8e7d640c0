"""Refusals of the query layer, each a DeltastateError subclass so the CLI and the REST service map
them to one exit status / HTTP status without parsing messages."""

from __future__ import annotations

from deltastate.errors import FreshReadError, QueryError, SnapshotError


class ParameterError(QueryError):
    """A read parameter is malformed or out of range; `parameter` names it (REST answers 400)."""

    def __init__(self, parameter: str, problem: str) -> None:
        super().__init__(f"parameter {parameter!r}: {problem}")
        self.parameter = parameter


class StoreTypeError(QueryError):
    """A read that the store's type does not support (a window fetch on a key-value store, a
    leaderboard on a store without one)."""

    def __init__(self, store: str, store_type: str, read: str, hint: str) -> None:
        super().__init__(f"store {store!r} is a {store_type} store: {read} is not available; {hint}")
        self.store = store


class SnapshotNotRetainedError(SnapshotError):
    """as_of_version / as_of names a snapshot that is not (or no longer) on disk."""


class StaleSnapshotError(SnapshotError):
    """The serving snapshot is older than the caller's max_staleness (REST answers 503)."""

    def __init__(self, store: str | None, staleness: float, max_staleness: float, version: int) -> None:
        what = f"store {store!r}" if store else "the snapshot"
        super().__init__(f"{what} in snapshot {version} is {staleness:.3f}s stale, more than "
                         f"max_staleness={max_staleness:g}s; retry later or relax max_staleness")
        self.store = store
        self.staleness = staleness
        self.max_staleness = max_staleness


class SqlLimitError(QueryError):
    """A SQL statement hit the service's time or row limit; it was stopped, not answered in part."""


__all__ = ["FreshReadError", "ParameterError", "SnapshotNotRetainedError", "SqlLimitError", "StaleSnapshotError",
           "StoreTypeError"]
