"""A run's stop waits for the running micro-batch to end before it stops the query."""

from __future__ import annotations

import time

from deltastate.engine.run import stop_between_batches


class ScriptedQuery:
    """A streaming query whose trigger and progress follow a script of (seconds from start, trigger
    active, newest finished batch id)."""

    def __init__(self, script: list[tuple[float, bool, int | None]]) -> None:
        self.script, self.started, self.stopped_at = script, time.monotonic(), None

    def _now(self) -> tuple[bool, int | None]:
        elapsed = time.monotonic() - self.started
        active, batch = self.script[0][1:]
        for at, a, b in self.script:
            if elapsed >= at:
                active, batch = a, b
        return active, batch

    @property
    def isActive(self) -> bool:  # noqa: N802 - the pyspark name
        return self.stopped_at is None

    @property
    def status(self) -> dict:
        return {"isTriggerActive": self._now()[0]}

    @property
    def lastProgress(self) -> dict | None:  # noqa: N802 - the pyspark name
        batch = self._now()[1]
        return None if batch is None else {"batchId": batch}

    def stop(self) -> None:
        self.stopped_at = time.monotonic() - self.started


def test_a_running_batch_ends_before_the_stop() -> None:
    query = ScriptedQuery([(0.0, True, 4), (0.4, False, 5)])
    stop_between_batches(query, wait_seconds=5)
    assert 0.4 <= query.stopped_at < 1.0


def test_a_batch_followed_at_once_by_the_next_is_seen_by_its_progress() -> None:
    # The trigger never looks idle (the next batch starts as the last ends); the new progress says
    # the batch that was running has ended.
    query = ScriptedQuery([(0.0, True, None), (0.3, True, 0)])
    stop_between_batches(query, wait_seconds=5)
    assert 0.3 <= query.stopped_at < 0.9


def test_an_idle_query_stops_at_once() -> None:
    query = ScriptedQuery([(0.0, False, 7)])
    stop_between_batches(query, wait_seconds=5)
    assert query.stopped_at < 0.3


def test_a_batch_longer_than_the_wait_is_stopped_when_it_runs_out() -> None:
    query = ScriptedQuery([(0.0, True, 2), (10.0, False, 3)])
    stop_between_batches(query, wait_seconds=0.5)
    assert 0.5 <= query.stopped_at < 1.2
