"""Spark's StreamingQueryProgress as deltastate's metrics: trigger phases and rates, the state
store's rows and memory, RocksDB's figures (stateOperators[].customMetrics, names as Spark 4.2's
RocksDBStateStoreProvider reports them) and the source's committed offsets.

`figures` is a pure function of the progress JSON; `ProgressListener` is the one
StreamingQueryListener a Spark session gets, routing each event by query name to the run's exporter.
"""

from __future__ import annotations

import atexit
import json
import logging
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

# RocksDB commit phases Spark times (milliseconds), by the phase label deltastate exports.
COMMIT_PHASES = {"flush": "rocksdbCommitFlushLatency", "compact": "rocksdbCommitCompactLatency",
                 "checkpoint": "rocksdbCommitCheckpointLatency", "file_sync": "rocksdbCommitFileSyncLatencyMs"}
IO_BYTES = {"read": "rocksdbTotalBytesRead", "write": "rocksdbTotalBytesWritten",
            "flush": "rocksdbTotalBytesWrittenByFlush"}


@dataclass
class Figures:
    batch_id: int
    name: str
    input_rate: float | None = None
    process_rate: float | None = None
    phases_ms: dict[str, float] = field(default_factory=dict)
    state_rows: int | None = None
    state_bytes: int | None = None
    rocksdb: dict[str, float] = field(default_factory=dict)  # summed over the state operators
    # topic -> partition -> next offset to read after this trigger (Kafka source endOffset)
    end_offsets: dict[str, dict[int, int]] = field(default_factory=dict)


def _num(value: Any) -> float | None:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(out) else out


def figures(progress: dict[str, Any]) -> Figures:
    out = Figures(int(progress.get("batchId", -1)), str(progress.get("name") or ""),
                  _num(progress.get("inputRowsPerSecond")), _num(progress.get("processedRowsPerSecond")),
                  {k: float(v) for k, v in (progress.get("durationMs") or {}).items()})
    operators = progress.get("stateOperators") or []
    if operators:
        out.state_rows = sum(int(op.get("numRowsTotal") or 0) for op in operators)
        out.state_bytes = sum(int(op.get("memoryUsedBytes") or 0) for op in operators)
        for op in operators:
            for name, value in (op.get("customMetrics") or {}).items():
                if (v := _num(value)) is not None:
                    out.rocksdb[name] = out.rocksdb.get(name, 0.0) + v
    for source in progress.get("sources") or []:
        end = source.get("endOffset")
        if isinstance(end, str):
            try:
                end = json.loads(end)
            except ValueError:
                continue
        if isinstance(end, dict):
            for topic, parts in end.items():
                if isinstance(parts, dict):
                    out.end_offsets.setdefault(topic, {}).update({int(p): int(o) for p, o in parts.items()})
    return out


def mean_latency_s(total_ms: float | None, count: float | None) -> float | None:
    """Spark reports a batch's summed call latency (ms) and its call count; the mean, in seconds."""
    if total_ms is None or not count:
        return None
    return total_ms / count / 1000.0


def hit_ratio(hits: float | None, misses: float | None) -> float:
    total = (hits or 0.0) + (misses or 0.0)
    return float("nan") if total == 0 else (hits or 0.0) / total


Route = Callable[[Figures], None]


class ProgressRouter:
    """query name -> the exporter that wants its progress (one run per query name at a time)."""

    def __init__(self) -> None:
        self._routes: dict[str, Route] = {}
        self._ends: dict[str, Callable[[], None]] = {}
        self._names: dict[str, str] = {}  # query id -> name (a termination event names only the id)
        self._lock = threading.Lock()

    def add(self, name_prefix: str, route: Route, on_end: Callable[[], None] | None = None) -> None:
        with self._lock:
            self._routes[name_prefix] = route
            if on_end is not None:
                self._ends[name_prefix] = on_end

    def remove(self, name_prefix: str) -> None:
        with self._lock:
            self._routes.pop(name_prefix, None)
            self._ends.pop(name_prefix, None)

    def started(self, query_id: str, name: str | None) -> None:
        with self._lock:
            self._names[query_id] = name or ""

    def terminated(self, query_id: str) -> None:
        """The query's run is over: its exporter stops (and is forgotten)."""
        with self._lock:
            name = self._names.pop(query_id, "")
            prefixes = [p for p in self._routes if name and name.startswith(p)]
            ends = [self._ends.pop(p) for p in prefixes if p in self._ends]
            for p in prefixes:
                self._routes.pop(p, None)
        for end in ends:
            end()

    def dispatch(self, progress_json: str) -> None:
        try:
            fig = figures(json.loads(progress_json))
        except (ValueError, TypeError) as exc:
            log.warning("unreadable streaming progress: %s", exc)
            return
        with self._lock:
            routes = [r for prefix, r in self._routes.items() if fig.name.startswith(prefix)]
        for route in routes:
            route(fig)


ROUTER = ProgressRouter()
_registered: set[int] = set()


def listen(spark) -> None:
    """Adds the router as a StreamingQueryListener to the session, once per session."""
    from pyspark.sql.streaming import StreamingQueryListener

    if id(spark) in _registered:
        return

    class _Listener(StreamingQueryListener):
        def onQueryStarted(self, event) -> None:  # noqa: N802 (Spark's names)
            ROUTER.started(str(event.id), event.name)

        def onQueryProgress(self, event) -> None:  # noqa: N802
            ROUTER.dispatch(event.progress.json)

        def onQueryIdle(self, event) -> None:  # noqa: N802
            pass

        def onQueryTerminated(self, event) -> None:  # noqa: N802
            ROUTER.terminated(str(event.id))

    listener = _Listener()
    spark.streams.addListener(listener)
    _registered.add(id(spark))
    # Spark calls the listener back through the Python gateway, from its own thread: an event
    # posted while this process exits (a query's end, just after it stopped) would meet a closed
    # gateway and print Spark's trace of the failed call. Removed at exit, the listener gets none.
    atexit.register(_forget, spark, listener)


def _forget(spark, listener) -> None:
    try:
        spark.streams.removeListener(listener)
    except Exception:  # noqa: BLE001 (a session already stopped has no listeners left to remove)
        pass
