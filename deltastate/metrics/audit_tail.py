"""What a run's batches say, per source partition: its audit rows (counts, offsets, stream times,
commit time; parsed by changelog/intake.py) and its dead letters (by reason), the dead letters read
from the Delta log and data files in plain Python (pyarrow), so the exporter costs the stream no
Spark job.

Only local tables are followed this way; on other storage the exporter keeps the batch totals the
engine reports, under partition "all".
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime

import pyarrow.compute as pc
import pyarrow.parquet as pq

from deltastate.changelog.deltalog import DeltaLog, appended_files, local_dir
from deltastate.changelog.intake import AuditRow
from deltastate.changelog.layout import LINEAGE_ID


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


def partition_batches(audit_rows: list[dict]) -> dict[int, list[PartitionBatch]]:
    """The audit rows' per-partition figures, in batch order."""
    out: dict[int, list[PartitionBatch]] = {}
    for row in sorted((AuditRow.parse(r) for r in audit_rows), key=lambda r: r.batch_id):
        counts = row.counts or {}
        committed = row.written
        if committed.tzinfo is None:
            committed = committed.replace(tzinfo=UTC)
        for p in sorted({*counts, *row.offsets}):
            out.setdefault(p, []).append(PartitionBatch(
                counts.get(p), row.offsets[p][1] if p in row.offsets else None, row.stream_times.get(p), committed))
    return out


def dead_letter_counts(rows: list[dict]) -> Counter[tuple[int, str]]:
    """(partition, reason) -> dead letters."""
    return Counter((int(r["partition"]), str(r["reason"])) for r in rows)
