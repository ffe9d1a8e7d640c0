"""What a run's new commits say, per source partition: its audit rows (counts, offsets, stream times,
commit time) and its dead letters (by reason), read from the Delta logs and data files in plain
Python (pyarrow), so the exporter costs the stream no Spark job.

Only local tables are followed this way; on other storage the exporter keeps the batch totals the
engine reports, under partition "all".
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime

import pyarrow.compute as pc
import pyarrow.parquet as pq

from deltastate.query.deltalog import DeltaLog, local_dir

AUDIT_COLUMNS = ["lineage_id", "batch_id", "offsets", "stream_times", "write_time", "partition_counts"]
DEAD_COLUMNS = ["lineage_id", "partition", "reason"]


@dataclass
class PartitionBatch:
    """One partition's share of a batch: (records_in, applied, dead_lettered, tombstones), the
    highest offset read, the newest applied event time (ms) and the commit time."""

    counts: tuple[int, int, int, int] | None
    hi: int | None
    event_ms: int | None
    committed: datetime


@dataclass
class TailFollower:
    """Reads the commits a table gained since the last call (starting from the table as it is at
    creation: earlier commits belong to earlier runs)."""

    path: str
    columns: list[str]
    seen: int | None = None
    _log: DeltaLog = field(default_factory=lambda: DeltaLog(ttl=0.0))

    def __post_init__(self) -> None:
        newest = self._log.newest_commit(self.path)
        self.seen = None if newest is None else newest.version
        self.local = local_dir(self.path) is not None

    def new_rows(self, lineage_id: str) -> list[dict]:
        if not self.local:
            return []
        newest = self._log.newest_commit(self.path)
        if newest is None or (self.seen is not None and newest.version <= self.seen):
            return []
        files = DeltaLog.tail_files(self.path, self.seen, newest.version)
        self.seen = newest.version
        rows: list[dict] = []
        for f in files:
            table = pq.read_table(f.path, columns=[c for c in self.columns if c in pq.read_schema(f.path).names])
            table = table.filter(pc.equal(table["lineage_id"], lineage_id))
            rows.extend(table.to_pylist())
        return rows


def partition_batches(audit_rows: list[dict]) -> dict[int, list[PartitionBatch]]:
    """The audit rows' per-partition figures, in batch order."""
    out: dict[int, list[PartitionBatch]] = {}
    for row in sorted(audit_rows, key=lambda r: r["batch_id"]):
        counts = json.loads(row.get("partition_counts") or "{}")
        offsets = json.loads(row.get("offsets") or "{}")
        times = json.loads(row.get("stream_times") or "{}")
        committed = row["write_time"]
        if committed.tzinfo is None:
            committed = committed.replace(tzinfo=UTC)
        for p in sorted({*counts, *offsets}, key=int):
            c = counts.get(p)
            out.setdefault(int(p), []).append(PartitionBatch(
                None if c is None else (int(c[0]), int(c[1]), int(c[2]), int(c[3])),
                None if p not in offsets else int(offsets[p][1]),
                None if times.get(p) is None else int(times[p]), committed))
    return out


def dead_letter_counts(rows: list[dict]) -> Counter[tuple[int, str]]:
    """(partition, reason) -> dead letters."""
    return Counter((int(r["partition"]), str(r["reason"])) for r in rows)
