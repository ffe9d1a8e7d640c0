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
from pathlib import Path
from urllib.parse import unquote

import pyarrow.compute as pc
import pyarrow.parquet as pq

from deltastate.changelog.deltalog import DeltaLog, local_dir
from deltastate.changelog.layout import BATCH_ID, LINEAGE_ID, WRITE_TIME

AUDIT_COLUMNS = [LINEAGE_ID, BATCH_ID, "offsets", "stream_times", WRITE_TIME, "partition_counts"]
DEAD_COLUMNS = [LINEAGE_ID, "partition", "reason"]


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
        first = 0 if self.seen is None else self.seen + 1
        self.seen = newest.version
        rows: list[dict] = []
        for path in appended_files(self.path, first, newest.version):
            names = pq.read_schema(path).names
            table = pq.read_table(path, columns=[c for c in self.columns if c in names])
            rows.extend(table.filter(pc.equal(table[LINEAGE_ID], lineage_id)).to_pylist())
        return rows


def appended_files(table_path: str, first: int, last: int) -> list[Path]:
    """Data files that commits first..last added as new data. OPTIMIZE's rewrites add files with
    dataChange false (the same rows again) and are left out, so rows are never counted twice."""
    root = local_dir(table_path)
    assert root is not None
    out: list[Path] = []
    for version in range(first, last + 1):
        commit = root / "_delta_log" / f"{version:020d}.json"
        try:
            lines = commit.read_text().splitlines()
        except FileNotFoundError:
            continue  # past log retention: that commit's rows are not counted
        for line in lines:
            add = json.loads(line).get("add") if line.strip() else None
            if add and add.get("dataChange", True):
                out.append(root / unquote(add["path"]))
    return out


def partition_batches(audit_rows: list[dict]) -> dict[int, list[PartitionBatch]]:
    """The audit rows' per-partition figures, in batch order."""
    out: dict[int, list[PartitionBatch]] = {}
    for row in sorted(audit_rows, key=lambda r: r[BATCH_ID]):
        counts = json.loads(row.get("partition_counts") or "{}")
        offsets = json.loads(row.get("offsets") or "{}")
        times = json.loads(row.get("stream_times") or "{}")
        committed = row[WRITE_TIME]
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
