"""Committed reads kept warm: a background thread that merges each new changelog commit into the
overlays of the current snapshot (query/fresh.py) as it lands.

Without it, a store's first committed read after the service starts, or after a snapshot swap,
reads every commit since the publish, and a read after a quiet spell reads every commit since the
last read: seconds, for a snapshot a few hundred commits behind. With it, a read finds at most the
commits of the last interval unmerged, the way a Kafka Streams instance answers interactive
queries from state it keeps current rather than from state it rebuilds when asked.
"""

from __future__ import annotations

import logging
import threading

from deltastate.errors import DeltastateError
from deltastate.query.consistency import ConsistentReads, Lease
from deltastate.query.reads import Queries

log = logging.getLogger(__name__)


class CommitFollower:
    """Calls reads.follow() every interval_s seconds until closed."""

    def __init__(self, reads: ConsistentReads, queries: Queries, lease: Lease, interval_s: float) -> None:
        self._reads, self._queries, self._lease = reads, queries, lease
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._reported: set[str] = set()  # failures logged once, not every interval
        self._thread = threading.Thread(target=self._run, name="commit-follower", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                failures = self._reads.follow(self._queries, self._lease)
            except DeltastateError:  # no snapshot to lease (none published yet): nothing to follow
                failures = []
            except Exception as exc:  # noqa: BLE001 (the thread outlives any one failure; reads report theirs)
                failures = [f"{type(exc).__name__}: {exc}"]
            for message in set(failures) - self._reported:
                log.warning("following changelog commits: %s", message)
            self._reported = set(failures)
            self._stop.wait(self._interval_s)

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10)


__all__ = ["CommitFollower"]
