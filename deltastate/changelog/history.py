"""A store's recent history from its own audit, without Spark: time series for the store pages.

Per micro-batch (one intake audit row each), at the time its audit commit landed:
  records_per_s  records in / batch time
  batch_s        batch time: the batch's start (batchTimestampMs in Spark's offset log of the store's
                 current checkpoint, while it keeps the batch) to its audit commit
  freshness_s    the audit commit's time - the newest event time applied so far (stream time)
  lag            records behind: per partition, the topic's offset at the commit's time (Kafka's
                 offsets_for_times) minus the position after the batch (Spark's offset log, else the
                 audit's offset ranges); the last point is the lag now
  dead_letters   records of the batch dead-lettered
and per commit of the changelog: state_rows and state_bytes, the rows and bytes of its live files.
Rows come from the parquet files the Delta logs name (log_replay.py); pyarrow reads them.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from deltastate.changelog.deltalog import local_dir
from deltastate.changelog.layout import CHANGELOG, INTAKE
from deltastate.changelog.log_replay import LiveFile, TableLog
from deltastate.changelog.rules import merge_stream_times
from deltastate.config import Settings
from deltastate.infra.offset_log import QUERY_FOLDER, planned_batches, read_entry
from deltastate.stores import load_store
from deltastate.stores.backends import WINDOWED, backend_of

_LOGS = TableLog()  # one replay per table for the process: a page asks every few seconds
LAG_SAMPLES = 60  # offsets_for_times round trips per answer, at most (the newest batch always)
# The engine's lineage file name (engine/common/lineage.LINEAGE_FILE; a test holds them equal):
# importing it would load the engine and pyspark into Airflow's API server.
CHECKPOINT_LINEAGE_FILE = "lineage.json"
CHECKPOINT_QUERY = QUERY_FOLDER
_COLUMNS = ("lineage_id", "batch_id", "records_in", "applied", "dead_lettered", "tombstones", "late",
            "offsets", "stream_times", "write_time", "totals_before")
SERIES: dict[str, tuple[str, str]] = {  # name -> (title, unit)
    "records_per_s": ("Throughput", "records/s"),
    "lag": ("Consumer lag", "records"),
    "batch_s": ("Batch time", "s"),
    "freshness_s": ("Freshness (commit - newest event)", "s"),
    "state_rows": ("State size: changelog rows", "rows"),
    "state_bytes": ("State size: changelog bytes", "bytes"),
    "dead_letters": ("Dead letters", "records"),
}


@dataclass(frozen=True)
class AuditBatch:
    lineage_id: str
    batch_id: int
    at_ms: int  # when its audit commit landed
    counts: dict[str, int]  # records_in, applied, dead_lettered, tombstones, late
    positions: dict[int, int]  # partition -> next offset to read after the batch (lineage so far)
    stream_time_ms: int | None  # newest applied event time of the lineage so far
    started_ms: int | None


def _ms(text: str) -> int:
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def _audit_rows(files: dict[str, LiveFile], since_ms: int) -> list[dict[str, Any]]:
    """The audit rows written at or after since_ms, oldest first (files whose stats say they end
    earlier are not opened)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    rows: list[dict[str, Any]] = []
    for f in files.values():
        newest = f.max_values.get("write_time")
        if newest is not None and _ms(newest) + 1 < since_ms:
            continue
        table = pq.ParquetFile(f.path).read()
        present = [c for c in _COLUMNS if c in table.column_names]
        table = table.select(present).set_column(
            present.index("write_time"), "write_time",
            pc.cast(table.column("write_time"), pa.timestamp("ms"), safe=False).cast(pa.int64()))
        rows.extend(r for r in table.to_pylist() if r["write_time"] >= since_ms)
    return sorted(rows, key=lambda r: r["write_time"])


def _checkpoint(settings: Settings, storage: str) -> tuple[str | None, Path]:
    """(lineage id, query checkpoint folder) of the store's current checkpoint."""
    root = Path(settings.checkpoint_path(storage))
    try:
        lineage = json.loads((root / CHECKPOINT_LINEAGE_FILE).read_text())["lineage_id"]
    except (FileNotFoundError, KeyError, ValueError):
        lineage = None
    return lineage, root / CHECKPOINT_QUERY


def _offset_log(query: Path, batch_id: int) -> tuple[int | None, dict[str, dict[int, int]]]:
    """(batchTimestampMs, {topic: {partition: next offset}}) of one entry of Spark's offset log."""
    try:
        entry = read_entry(query, batch_id)
    except FileNotFoundError:
        return None, {}
    kafka = entry.kafka_offsets()
    return entry.timestamp_ms, {} if kafka is None else {kafka[0]: kafka[1]}


def audit_batches(settings: Settings, store_name: str, since_ms: int) -> tuple[list[AuditBatch], str]:
    """The store's audited micro-batches whose audit row was written at or after since_ms, and the
    topic its current checkpoint reads (the declared topic when the checkpoint does not say)."""
    store = load_store(settings, store_name)
    path = settings.table_path(store.storage, INTAKE)
    root = local_dir(path)
    if root is None:
        raise ValueError(f"store {store_name!r}: history reads local tables only, not {path}")
    commits, files = _LOGS.replay(root, since_ms)
    landed = {(app.rsplit("/", 1)[-1], version): c.at_ms for c in commits for app, version in c.txns
              if f"/{INTAKE}/" in app}
    current, query = _checkpoint(settings, store.storage)
    logged = planned_batches(query)
    topic = next(iter(_offset_log(query, logged[-1])[1]), store.source.topic) if logged else store.source.topic
    positions: dict[str, dict[int, int]] = {}
    times: dict[str, dict[int, int]] = {}
    out = []
    for row in _audit_rows(files, since_ms):
        lineage = row["lineage_id"]
        if lineage not in positions:  # key-value rows carry the offsets read before them
            carried = json.loads(row.get("totals_before") or "{}").get("hi", {})
            positions[lineage] = {int(p): int(hi) + 1 for p, hi in carried.items()}
        for p, (_, hi) in json.loads(row["offsets"] or "{}").items():
            positions[lineage][int(p)] = max(positions[lineage].get(int(p), 0), int(hi) + 1)
        times[lineage] = merge_stream_times(times.get(lineage, {}), [row["stream_times"]])
        started = None
        if lineage == current:  # Spark's offset log: the batch's start and the exact positions after it
            started, sources = _offset_log(query, row["batch_id"])
            positions[lineage].update({int(p): int(o) for p, o in sources.get(topic, {}).items()})
        out.append(AuditBatch(
            lineage, int(row["batch_id"]), landed.get((lineage, row["batch_id"]), row["write_time"]),
            {c: int(row.get(c) or 0) for c in ("records_in", "applied", "dead_lettered", "tombstones", "late")},
            dict(positions[lineage]), max(times[lineage].values(), default=None), started))
    return out, topic


def _topic_offsets(bootstrap: str, topic: str, at_ms: list[int], timeout_s: float) -> tuple[list[dict[int, int]], dict[int, int]]:
    """Per time, each partition's first offset written at or after it (the end then), and the end now."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    from deltastate.infra.topics import partitions_of, watermarks_of

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "deltastate-store-pages",
                         "enable.auto.commit": False, "socket.timeout.ms": max(10_000, int(timeout_s * 1000)),
                         "log_level": 0})  # an unreachable broker is reported in the answer, not in the log
    try:
        partitions = partitions_of(consumer, topic, timeout_s)
        if not partitions:
            raise KafkaException(f"topic {topic!r} is not on the broker")
        ends = {p: watermarks_of(consumer, topic, p, timeout_s)[1] for p in partitions}
        found = []
        for t in at_ms:
            answer = consumer.offsets_for_times([TopicPartition(topic, p, t) for p in partitions], timeout=timeout_s)
            # -1: nothing written at or after t, so the end now is the end then.
            found.append({tp.partition: ends[tp.partition] if tp.offset < 0 else int(tp.offset) for tp in answer})
        return found, ends
    finally:
        consumer.close()


def _lag(settings: Settings, topic: str, batches: list[AuditBatch], now_ms: int,
         timeout_s: float) -> tuple[list[list], str | None]:
    if not batches:
        return [], None
    step = max(1, -(-len(batches) // LAG_SAMPLES))
    sampled = batches[::-1][::step][::-1]  # evenly spaced, always ending with the newest batch
    try:
        at_times, ends = _topic_offsets(settings.kafka_bootstrap, topic, [b.at_ms for b in sampled], timeout_s)
    except Exception as exc:  # an unreachable broker leaves the other charts readable
        return [], f"Kafka at {settings.kafka_bootstrap} did not answer for topic {topic!r}: {exc}"

    def behind(b: AuditBatch, offsets: dict[int, int]) -> int:
        # A partition the lineage's position is not known for (no batch of it in the window, no
        # offset log entry) is left out rather than counted whole.
        return sum(max(0, end - b.positions[p]) for p, end in offsets.items() if p in b.positions)

    points = [[b.at_ms, behind(b, o)] for b, o in zip(sampled, at_times)]
    return points + [[now_ms, behind(batches[-1], ends)]], None


def store_history(settings: Settings, store_name: str, hours: float, now_ms: int | None = None,
                  kafka_timeout_s: float = 3.0) -> dict[str, Any]:
    """The store's series over the last `hours`: {series: {title, unit, points [[ms, value]]}}, the
    batches they come from, totals, and a note per series that has no points saying why."""
    store = load_store(settings, store_name)
    now_ms = now_ms or int(time.time() * 1000)
    since_ms = now_ms - int(hours * 3_600_000)
    batches, topic = audit_batches(settings, store_name, since_ms)
    points: dict[str, list[list]] = {name: [] for name in SERIES}
    for b in batches:
        batch_s = None if b.started_ms is None else max(0.001, (b.at_ms - b.started_ms) / 1000)
        if batch_s is not None:
            points["batch_s"].append([b.at_ms, round(batch_s, 3)])
            points["records_per_s"].append([b.at_ms, round(b.counts["records_in"] / batch_s, 3)])
        if b.stream_time_ms is not None:
            points["freshness_s"].append([b.at_ms, round((b.at_ms - b.stream_time_ms) / 1000, 3)])
        points["dead_letters"].append([b.at_ms, b.counts["dead_lettered"]])
    notes: dict[str, str] = {}
    points["lag"], lag_note = _lag(settings, topic, batches, now_ms, kafka_timeout_s)
    if lag_note:
        notes["lag"] = lag_note
    root = local_dir(settings.table_path(store.storage, CHANGELOG))
    commits = _LOGS.replay(root, since_ms)[0] if root is not None else []
    earlier = [c for c in commits if c.at_ms < since_ms]
    for c in ([earlier[-1]] if earlier else []) + [c for c in commits if c.at_ms >= since_ms]:
        at = max(c.at_ms, since_ms)  # the state the window starts with, drawn at its start
        points["state_bytes"].append([at, c.bytes])
        if c.rows is not None:
            points["state_rows"].append([at, c.rows])
    for name, series in points.items():
        if not series and name not in notes:
            notes[name] = ("batch start times are no longer in the checkpoint's offset log"
                           if name in ("batch_s", "records_per_s") and batches else
                           "no changelog commits" if name.startswith("state_") else
                           "no applied events" if name == "freshness_s" and batches else
                           f"no audited micro-batches in the last {hours:g} h")
    totals = {c: sum(b.counts[c] for b in batches) for c in ("records_in", "applied", "dead_lettered", "tombstones", "late")}
    iso = lambda ms: datetime.fromtimestamp(ms / 1000, UTC).isoformat()  # noqa: E731
    return {
        "store": store_name, "store_type": store.type, "topic": topic, "windowed": backend_of(store).family == WINDOWED,
        "hours": hours, "since": iso(since_ms), "until": iso(now_ms), "batch_count": len(batches), "totals": totals,
        "series": {name: {"title": title, "unit": unit, "points": points[name]} for name, (title, unit) in SERIES.items()},
        "notes": notes,
        "batches": [{"lineage_id": b.lineage_id, "batch_id": b.batch_id, "at": iso(b.at_ms), **b.counts} for b in batches],
    }


__all__ = ["SERIES", "AuditBatch", "audit_batches", "store_history"]
