"""The intake audit, read: the one module that opens a store's intake table for its audit columns
(layout.INTAKE_COLUMNS) and parses their JSON, answering with frozen dataclasses. Through Spark: where
the stream stands (audit_position), a lineage's newest row and what its writer carried into it
(newest_lineage_audit) or its rows (lineage_audits), stream times (stream_times, stream_times_frame),
which batches are audited (newest_audited, audited_batches), records counted (records_audited). In
plain Python, for the query service, which loads no pyspark: the committed offsets (committed_offsets)
and stream times after an intake version (stream_times_after); AuditRow.parse for rows read elsewhere.

The JSON a writer carries into a batch (totals_before) is written here too (carried_counts_json,
carried_stream_times_json), so its keys are named once; audit_log.py writes the rows.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from deltastate.changelog.deltalog import DeltaLog
from deltastate.changelog.layout import (
    BATCH_ID,
    INTAKE,
    LINEAGE_ID,
    OFFSETS,
    PARTITION_COUNTS,
    RECORDS_IN,
    STREAM_TIMES,
    TOTALS_BEFORE,
    WRITE_TIME,
)
from deltastate.changelog.rules import merge_stream_times
from deltastate.config import Settings
from deltastate.errors import FreshReadError
from deltastate.stores.definition import StoreDefinition

if TYPE_CHECKING:  # pyspark is slow to import, and the query service never loads it
    from pyspark.sql import DataFrame, SparkSession

Counts = tuple[int, int, int, int]  # records_in, applied, dead_lettered, tombstones (layout.AUDIT_COUNTS)
_CARRIED_COUNTS, _CARRIED_HI = "counts", "hi"  # keys of a key-value writer's totals_before
_SEARCH_BACK = 20  # commits of the intake table searched for the newest audit row
# (intake path, its newest version) -> its committed offsets: a latest read between two batches reads no file.
_OFFSETS_CACHE: dict[tuple[str, int], dict[int, int]] = {}
_OFFSETS_LOCK = threading.Lock()


@dataclass(frozen=True)
class Carried:
    """What a lineage's writer carried into a batch (its totals_before): key-value stores the count sums
    and highest offsets of the lineage's earlier batches, window and session stores the stream times."""

    counts: Mapping[int, Counts] = field(default_factory=dict)
    hi: Mapping[int, int] = field(default_factory=dict)
    stream_times: Mapping[int, int] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str | None) -> Carried | None:
        if text is None:
            return None
        found = json.loads(text)
        return cls({int(p): _counts(c) for p, c in found.get(_CARRIED_COUNTS, {}).items()},
                   {int(p): int(hi) for p, hi in found.get(_CARRIED_HI, {}).items()},
                   {int(p): int(ms) for p, ms in found.get(STREAM_TIMES, {}).items()})


def carried_counts_json(counts: Mapping[int, Counts], hi: Mapping[int, int]) -> str:
    """A key-value writer's totals_before: count sums and highest offsets before the batch."""
    return json.dumps({_CARRIED_COUNTS: {str(p): list(c) for p, c in sorted(counts.items())},
                       _CARRIED_HI: {str(p): h for p, h in sorted(hi.items())}})


def carried_stream_times_json(times: Mapping[int, int]) -> str:
    """A window or session writer's totals_before: the stream times the batch starts from."""
    return json.dumps({STREAM_TIMES: {str(p): ms for p, ms in sorted(times.items())}})


@dataclass(frozen=True)
class AuditRow:
    """One batch's audit row. counts is None for a row written before partition_counts existed;
    carried is None for one written before totals_before existed."""

    lineage_id: str | None
    batch_id: int
    offsets: Mapping[int, tuple[int, int]]
    stream_times: Mapping[int, int]
    counts: Mapping[int, Counts] | None = None
    carried: Carried | None = None
    written: datetime | None = None

    @classmethod
    def parse(cls, row: Mapping[str, Any]) -> AuditRow:
        """From a row as Spark or pyarrow give it; absent columns read as null."""
        counts = row.get(PARTITION_COUNTS)
        return cls(row.get(LINEAGE_ID), int(row[BATCH_ID]),
                   {int(p): (int(lo), int(hi)) for p, (lo, hi) in json.loads(row.get(OFFSETS) or "{}").items()},
                   {int(p): int(ms) for p, ms in json.loads(row.get(STREAM_TIMES) or "{}").items() if ms is not None},
                   None if counts is None else {int(p): _counts(c) for p, c in json.loads(counts).items()},
                   Carried.parse(row.get(TOTALS_BEFORE)), row.get(WRITE_TIME))

    @property
    def highest_offsets(self) -> dict[int, int]:
        """Partition -> the highest offset the lineage had read by the end of this batch."""
        out = {} if self.carried is None else dict(self.carried.hi)
        for p, (_, hi) in self.offsets.items():
            out[p] = max(out.get(p, -1), hi)
        return out


def _counts(values: Iterable[Any]) -> Counts:
    a, b, c, d = (int(v) for v in values)
    return a, b, c, d


@dataclass(frozen=True)
class AuditPosition:
    """Where a store's stream stands by its intake audit, from one read of the table: per partition
    the (lowest, highest) offset the rows cover, and the stream time (newest applied event time)."""

    ranges: Mapping[int, tuple[int, int]]
    stream_times: Mapping[int, int]

    @property
    def next_offsets(self) -> dict[int, int]:
        """Partition -> one past the highest offset any audit row covers."""
        return {p: hi + 1 for p, (_lo, hi) in self.ranges.items()}


def _path(settings: Settings, store: StoreDefinition) -> str:
    return settings.table_path(store.storage, INTAKE)


def _table(spark: SparkSession, settings: Settings, store: StoreDefinition, version: int | None = None) -> DataFrame | None:
    from deltastate.changelog.tables import table_exists

    path = _path(settings, store)
    if not table_exists(spark, path):
        return None
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", int(version))
    return reader.load(path)


def intake_version(spark: SparkSession, settings: Settings, store: StoreDefinition) -> int | None:
    """The intake table's newest Delta version (None: no table), the version stream_times can read at."""
    from deltastate.changelog.reader import changelog_version

    return changelog_version(spark, _path(settings, store))


def audit_position(spark: SparkSession, settings: Settings, store: StoreDefinition) -> AuditPosition:
    table = _table(spark, settings, store)
    if table is None:
        return AuditPosition({}, {})
    # One row per micro-batch: small enough to read whole, and one read keeps offsets and stream
    # times consistent while the stream keeps appending.
    rows = table.select(OFFSETS, STREAM_TIMES).collect()
    ranges: dict[int, tuple[int, int]] = {}
    for row in rows:
        for p, (lo, hi) in json.loads(row[OFFSETS] or "{}").items():
            old = ranges.get(int(p))
            ranges[int(p)] = (int(lo), int(hi)) if old is None else (min(old[0], int(lo)), max(old[1], int(hi)))
    return AuditPosition(ranges, merge_stream_times({}, (row[STREAM_TIMES] for row in rows)))


def newest_lineage_audit(spark: SparkSession, settings: Settings, store: StoreDefinition, app_id: str,
                         lineage_id: str) -> AuditRow | None:
    """The newest row the lineage appended (app_id: its intake txnAppId), read alone: the log names its
    batch (txn_log). None when the lineage appended nothing; raises txn_log.UnknownFromLog when the
    log cannot tell or the table predates totals_before, so the caller sums the history instead."""
    from deltastate.changelog.txn_log import newest_lineage_row

    found = newest_lineage_row(spark, _path(settings, store), app_id, lineage_id,
                               [OFFSETS, STREAM_TIMES, PARTITION_COUNTS, TOTALS_BEFORE])
    if found is None:
        return None
    batch_id, row = found
    return AuditRow.parse({**row.asDict(), LINEAGE_ID: lineage_id, BATCH_ID: batch_id})


def lineage_audits(spark: SparkSession, settings: Settings, store: StoreDefinition, lineage_id: str,
                   through_batch: int) -> list[AuditRow]:
    """The lineage's rows of batches up to through_batch, in no particular order."""
    from pyspark.sql import functions as F

    table = _table(spark, settings, store)
    if table is None:
        return []
    # A table from before partition_counts gains the column with this engine's first audit append.
    counts = F.col(PARTITION_COUNTS) if PARTITION_COUNTS in table.columns else F.lit(None).cast("string")
    rows = (table.where((F.col(LINEAGE_ID) == lineage_id) & (F.col(BATCH_ID) <= through_batch))
            .select(LINEAGE_ID, BATCH_ID, OFFSETS, counts.alias(PARTITION_COUNTS)).collect())
    return [AuditRow.parse(r.asDict()) for r in rows]


def stream_times(spark: SparkSession, settings: Settings, store: StoreDefinition, *,
                 intake_version: int | None = None, before: tuple[str, int] | None = None) -> dict[int, int]:
    """Partition -> stream time (newest applied event time, ms) over the audited micro-batches: every
    row up to a Delta version of the intake table (default: latest), less, when `before` is
    (lineage_id, batch_id), that lineage's rows from that batch on."""
    from pyspark.sql import functions as F

    table = _table(spark, settings, store, intake_version)
    if table is None:
        return {}
    if before is not None:
        table = table.where(~((F.col(LINEAGE_ID) == before[0]) & (F.col(BATCH_ID) >= before[1])))
    rows = table.where(F.col(STREAM_TIMES).isNotNull()).select(STREAM_TIMES).collect()
    return merge_stream_times({}, (row[STREAM_TIMES] for row in rows))


def stream_times_frame(spark: SparkSession, settings: Settings, store: StoreDefinition) -> DataFrame:
    """(source_partition int, stream_time bigint) per partition that has a stream time."""
    from deltastate.changelog.rules import stream_times_frame as per_partition

    return per_partition(spark.read.format("delta").load(_path(settings, store)))


def records_audited(spark: SparkSession, settings: Settings, store: StoreDefinition) -> int:
    """Records in over every audit row: each record the stream read, counted once per batch."""
    from pyspark.sql import functions as F

    table = _table(spark, settings, store)
    return 0 if table is None else int(table.agg(F.coalesce(F.sum(RECORDS_IN), F.lit(0))).first()[0])


def newest_audited(spark: SparkSession, settings: Settings, store: StoreDefinition) -> dict[str, int]:
    """Lineage -> its newest batch with an audit row."""
    from pyspark.sql import functions as F

    table = _table(spark, settings, store)
    if table is None:
        return {}
    rows = table.groupBy(LINEAGE_ID).agg(F.max(BATCH_ID).alias("b")).collect()
    return {r[LINEAGE_ID]: int(r["b"]) for r in rows if r[LINEAGE_ID] is not None}


def audited_batches(spark: SparkSession, settings: Settings, store: StoreDefinition) -> DataFrame | None:
    """(lineage_id, batch_id) of every batch with an audit row, distinct; None without an intake table."""
    table = _table(spark, settings, store)
    return None if table is None else table.select(LINEAGE_ID, BATCH_ID).distinct()


def committed_offsets(settings: Settings, deltalog: DeltaLog, store: StoreDefinition) -> dict[int, int]:
    """Partition -> the highest offset the stream has audited (folded or dead-lettered), from the
    newest intake audit row, in plain Python; {} when the store has committed nothing."""
    path = _path(settings, store)
    newest = deltalog.newest_commit(path)
    if newest is None:
        return {}
    with _OFFSETS_LOCK:
        cached = _OFFSETS_CACHE.get((path, newest.version))
    if cached is not None:
        return dict(cached)
    found = _offsets_at(path, deltalog, store, newest.version)
    with _OFFSETS_LOCK:
        if len(_OFFSETS_CACHE) > 256:
            _OFFSETS_CACHE.clear()
        _OFFSETS_CACHE[(path, newest.version)] = found
    return dict(found)


def _offsets_at(path: str, deltalog: DeltaLog, store: StoreDefinition, newest: int) -> dict[int, int]:
    import pyarrow.parquet as pq

    for version in range(newest, max(-1, newest - _SEARCH_BACK), -1):
        files = deltalog.tail_files(path, version - 1, version)
        if not files:
            continue
        try:
            rows = pq.read_table(files[-1].path, columns=[BATCH_ID, OFFSETS, TOTALS_BEFORE]).to_pylist()
        except (OSError, ValueError) as exc:
            raise FreshReadError(f"store {store.name!r}: reading its newest audit row failed: {exc}") from exc
        return AuditRow.parse(max(rows, key=lambda r: r[BATCH_ID])).highest_offsets
    raise FreshReadError(f"store {store.name!r}: no audit row in the newest {_SEARCH_BACK} commits of its intake "
                         "table; the stream's committed position is unknown")


def stream_times_after(settings: Settings, deltalog: DeltaLog, store: StoreDefinition, after: int | None,
                       times: Mapping[int, int]) -> tuple[dict[int, int], int | None]:
    """`times` advanced by the audit rows of intake commits after version `after` (every commit when
    None), in plain Python, and the intake version they reach (`after` when nothing is newer)."""
    import pyarrow.parquet as pq

    path = _path(settings, store)
    out = dict(times)
    newest = deltalog.newest_commit(path)
    if newest is None or (after is not None and newest.version <= after):
        return out, after
    try:
        for f in deltalog.tail_files(path, after, newest.version):
            if STREAM_TIMES not in pq.read_schema(f.path).names:
                continue
            out = merge_stream_times(out, pq.read_table(f.path, columns=[STREAM_TIMES]).column(0).to_pylist())
    except (OSError, ValueError) as exc:
        raise FreshReadError(f"store {store.name!r}: reading intake commits after version {after} "
                             f"failed: {exc}") from exc
    return out, newest.version

