"""Spark's checkpoint logs of one streaming query, read in plain Python: the one parser of
`<query checkpoint>/offsets/<batch>` and the one lister of `offsets/` and `commits/`.

Spark writes an offset log entry when it plans a micro-batch and a commit entry when the batch is
done. An offset log entry is text: the log version ("v1"), then the batch's metadata as JSON
(batchTimestampMs, and `conf`: the session settings the query pinned at its first batch, which
Spark restores on restart whatever the new session says), then one line per source, in the query's
source order: JSON of where the source stands after the batch ({topic: {partition: next offset}}
for Kafka), or "-" for a source without offsets.

Plain Python, so that Airflow's API server (store pages) and the query service read it without
loading pyspark. Only the files are read; nothing here writes to a checkpoint.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

QUERY_FOLDER = "stream"  # the folder of a store's checkpoint that holds its one streaming query's checkpoint
OFFSETS = "offsets"  # the folder of planned batches (one offset log entry each)
COMMITS = "commits"  # the folder of finished batches
SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"  # pinned in `conf`: the state store's shard count


def batch_ids(folder: Path) -> list[int]:
    """The batch ids a log folder holds, ascending (Spark's temp files and .crc files skipped)."""
    return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit()) if folder.is_dir() else []


def planned_batches(query_checkpoint: str | Path) -> list[int]:
    return batch_ids(Path(query_checkpoint) / OFFSETS)


def committed_batches(query_checkpoint: str | Path) -> list[int]:
    return batch_ids(Path(query_checkpoint) / COMMITS)


def log_folders(query_checkpoint: Path) -> tuple[Path, Path]:
    """(offsets, commits) folders of a query checkpoint, for callers that clean or watch them."""
    return query_checkpoint / OFFSETS, query_checkpoint / COMMITS


@dataclass(frozen=True)
class OffsetLogEntry:
    """One offset log entry, parsed line by line on demand: a checkpoint check that only asks for
    the version line must not fail on a metadata line it never needed."""

    batch_id: int
    lines: tuple[str, ...]

    @property
    def version(self) -> str:
        return self.lines[0] if self.lines else ""

    @cached_property
    def metadata(self) -> dict[str, Any]:
        return json.loads(self.lines[1]) if len(self.lines) > 1 else {}

    @property
    def timestamp_ms(self) -> int | None:
        """When Spark planned the batch (batchTimestampMs)."""
        return self.metadata.get("batchTimestampMs")

    @property
    def conf(self) -> dict[str, str]:
        return self.metadata.get("conf", {})

    def kafka_offsets(self) -> tuple[str, dict[int, int]] | None:
        """(topic, partition -> next offset) of the first Kafka source; None when no source line
        has that shape (a restored store's seed is a Delta source, with a line of its own)."""
        for line in self.lines[2:]:
            source = json.loads(line) if line.startswith("{") else None
            if not isinstance(source, dict) or not all(isinstance(v, dict) for v in source.values()):
                continue
            for topic, partitions in source.items():
                if all(str(p).isdigit() for p in partitions):
                    return topic, {int(p): int(o) for p, o in partitions.items()}
        return None


def read_entry(query_checkpoint: str | Path, batch_id: int) -> OffsetLogEntry:
    """The batch's offset log entry; FileNotFoundError when Spark has not planned it (or dropped it)."""
    text = (Path(query_checkpoint) / OFFSETS / str(batch_id)).read_text()
    return OffsetLogEntry(batch_id, tuple(text.splitlines()))


def newest_planned(query_checkpoint: str | Path) -> OffsetLogEntry | None:
    """The entry of the newest planned batch; None before the query's first batch."""
    planned = planned_batches(query_checkpoint)
    return read_entry(query_checkpoint, planned[-1]) if planned else None


def newest_committed(query_checkpoint: str | Path) -> OffsetLogEntry | None:
    """The offset log entry of the newest finished batch; None before one finished."""
    committed = committed_batches(query_checkpoint)
    return read_entry(query_checkpoint, committed[-1]) if committed else None


def stream_source(query_checkpoint: str | Path) -> tuple[str, dict[int, int]] | None:
    """(topic, partition -> next offset) of the Kafka source where the query's newest finished batch
    left it: the topic the stream reads (which a run's --topic may set) and every partition of it.
    None before a batch finished."""
    entry = newest_committed(query_checkpoint)
    return None if entry is None else entry.kafka_offsets()


__all__ = [
    "COMMITS", "OFFSETS", "QUERY_FOLDER", "SHUFFLE_PARTITIONS", "OffsetLogEntry", "batch_ids", "committed_batches",
    "log_folders", "newest_committed", "newest_planned", "planned_batches", "read_entry", "stream_source",
]
