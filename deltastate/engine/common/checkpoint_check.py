"""Does a store's Spark checkpoint agree with its changelog? Checked before every run.

Spark trusts its checkpoint: started on a checkpoint that lost its lineage, its metadata or its
newest batches, it would replay the topic from the wrong place and count events again (or skip
them) without a word. The changelog and the intake audit record which lineage wrote which batch,
so a checkpoint can be held against them; on any disagreement the run is refused with the command
that fixes it (`deltastate restore <store>`).

The check costs the Delta logs, not the history: each append is idempotent (txnAppId = the
lineage's table app id, txnVersion = the batch id), so the log already holds every lineage's newest
batch, and other lineages are looked for only in the current epoch's partitions.
"""

from __future__ import annotations

import json
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from deltastate.changelog.layout import CHANGELOG, EPOCH, INTAKE, LINEAGE_ID, SEGMENT, segment_of
from deltastate.changelog.log_state import file_column_range, read_log_state
from deltastate.changelog.tables import table_exists
from deltastate.changelog.txn_log import log_snapshot, newest_batch
from deltastate.config import Settings
from deltastate.engine.common.lineage import LINEAGE_FILE, Lineage, read_marker
from deltastate.engine.common.source import QUERY
from deltastate.errors import CheckpointMismatchError
from deltastate.infra.offset_log import COMMITS, OFFSETS, committed_batches, newest_planned, planned_batches, read_entry
from deltastate.stores.backends import backend_of
from deltastate.stores.definition import StoreDefinition
from deltastate.stores.state import PROVIDER_KEY

CLEANUP_PREFIX = "deltastate-cleanup/"


def _only_own_rows_since(path: str, epoch: int, lineage_id: str) -> bool:
    """True when the table's file statistics prove that no file of epoch >= `epoch` holds a row of
    another lineage (cleanup's aside), read from the local Delta log; False when they cannot.
    Delta truncates string statistics to a prefix, so a file is passed only on min == max == the
    lineage id, or on both bounds carrying cleanup's prefix (every string between them does too)."""
    state = read_log_state(path, with_files=True)
    if state is None:
        return False
    floor = segment_of(epoch, 0)
    for add in (state.files or {}).values():
        segment = (add.get("partitionValues") or {}).get(SEGMENT)
        if segment is None or int(segment) < floor:
            continue  # pruned by the segment filter (a null segment never passes it either)
        bounds = file_column_range(add, LINEAGE_ID)
        if bounds is None:
            return False
        low, high, all_null = bounds
        if all_null or low == high == lineage_id:
            continue
        if str(low).startswith(CLEANUP_PREFIX) and str(high).startswith(CLEANUP_PREFIX):
            continue
        return False
    return True


def _lineages_since(spark: SparkSession, path: str, epoch: int, lineage_id: str) -> dict[str, int]:
    """Other lineages (not cleanup) with changelog rows of epoch >= `epoch`: lineage_id -> newest epoch.
    The segment (epoch * 1e9 + batch / 100) prunes older epochs' partitions, and the files the
    running lineage wrote alone, whose lineage_id statistics hold only its id, are skipped by Delta's
    data skipping. Still read: files of cleanup tombstones and files compaction mixed, and every
    file when lineage_id falls outside the 32 columns Delta keeps statistics for (a store with more
    than about 20 value fields)."""
    if not table_exists(spark, path) or _only_own_rows_since(path, epoch, lineage_id):
        return {}
    rows = (spark.read.format("delta").load(path)
            .where((F.col(SEGMENT) >= F.lit(segment_of(epoch, 0))) & (F.col(LINEAGE_ID) != F.lit(lineage_id))
                   & ~F.col(LINEAGE_ID).startswith(CLEANUP_PREFIX))
            .groupBy(LINEAGE_ID).agg(F.max(EPOCH).alias(EPOCH)).collect())
    return {r[LINEAGE_ID]: int(r[EPOCH]) for r in rows if r[EPOCH] is not None and r[EPOCH] >= epoch}


def _lineages(spark: SparkSession, path: str) -> set[str]:
    if not table_exists(spark, path):
        return set()
    rows = spark.read.format("delta").load(path).where(F.col(LINEAGE_ID).isNotNull()).select(LINEAGE_ID).distinct()
    return {r[LINEAGE_ID] for r in rows.collect()}


def _has_lineage_rows(spark: SparkSession, path: str) -> bool:
    local = read_log_state(path, with_files=True)
    if local is not None:
        empty = local.absent or not local.files
    else:
        snapshot = log_snapshot(spark, path)
        empty = snapshot is None or snapshot.numOfFiles() == 0
    if empty:  # a new store's empty table: no read
        return False
    return bool(spark.read.format("delta").load(path).where(F.col(LINEAGE_ID).isNotNull()).limit(1).collect())


def query_started(query_checkpoint: str) -> bool:
    folder = Path(query_checkpoint)
    return (folder / "metadata").is_file() or bool(planned_batches(folder))


def any_query_started(checkpoint: str) -> bool:
    folder = Path(checkpoint)
    return folder.is_dir() and any(query_started(str(q)) for q in folder.iterdir() if q.is_dir())


def _refuse(store: str, problem: str) -> CheckpointMismatchError:
    return CheckpointMismatchError(
        f"store {store!r}: {problem}. Running on it would lose or double-count events; rebuild the "
        f"checkpoint from the changelog with `deltastate restore {store}`, then run again")


def _check_query(store: str, folder: Path, newest_in_table: int | None, table: str, stateful: bool) -> None:
    """One query's checkpoint folder against the newest batch its lineage wrote to its table."""
    offsets, commits = planned_batches(folder), committed_batches(folder)
    if not folder.is_dir() or not (offsets or (folder / "metadata").is_file()):
        if newest_in_table is not None:
            raise _refuse(store, f"checkpoint {folder} is missing, but the {table} table holds batches up "
                                 f"to {newest_in_table} written from it")
        return  # this query has not started in this checkpoint yet
    if not (folder / "metadata").is_file():
        raise _refuse(store, f"checkpoint {folder} has no metadata file (planned batches up to "
                             f"{offsets[-1] if offsets else None})")
    try:
        json.loads((folder / "metadata").read_text())["id"]
        if offsets and not read_entry(folder, offsets[-1]).version.startswith("v"):
            raise ValueError(f"{OFFSETS}/{offsets[-1]} is not an offset log entry")
    except (ValueError, KeyError, OSError) as exc:
        raise _refuse(store, f"checkpoint {folder} is unreadable ({exc})") from exc
    if newest_in_table is not None and (not offsets or newest_in_table > offsets[-1]):
        raise _refuse(store, f"checkpoint {folder} is older than the {table} table: it planned batches up to "
                             f"{offsets[-1] if offsets else 'none'}, the table holds batch {newest_in_table} "
                             "of the same lineage")
    if stateful and commits and not _state_present(folder / "state" / "0"):
        raise _refuse(store, f"checkpoint {folder} committed batch {commits[-1]} but its state "
                             f"folder {folder / 'state' / '0'} is missing or empty")


def checkpoint_state_provider(query_checkpoint: str) -> str | None:
    """The state store provider class a query's offset log pins (None before its first batch).
    Spark restores it from the log on restart, whatever the session says."""
    newest = newest_planned(query_checkpoint)
    return None if newest is None else newest.conf.get(PROVIDER_KEY)


def _check_provider(store: StoreDefinition, folder: Path) -> None:
    pinned = checkpoint_state_provider(str(folder))
    if pinned is not None and pinned != store.state.provider_class:
        raise CheckpointMismatchError(
            f"store {store.name!r}: state.provider {store.state.provider!r} ({store.state.provider_class}) differs "
            f"from the provider its checkpoint {folder} was started with ({pinned}); a running store keeps its "
            f"provider. Change it back, or rebuild the checkpoint with the new provider from the changelog: "
            f"`deltastate restore {store.name}`")


def _state_present(state: Path) -> bool:
    shards = [p for p in state.iterdir() if p.name.isdigit()] if state.is_dir() else []
    return bool(shards) and all(any(f.is_file() for f in shard.rglob("*")) for shard in shards)


def drop_orphan_temp_files(checkpoint: Path) -> list[Path]:
    """Removes the temp files of log entries a killed run never renamed into place.

    Spark writes each offsets/commits entry to `.<n>.<uuid>.tmp` (plus a `.crc`) and renames it; a
    kill -9 in between leaves the temp file behind. Harmless for later batches, but before the first
    one Spark 4 refuses a non-empty offsets folder (STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY), so
    one unlucky kill would stop the store for good. Only called under the writer lock, so no live
    writer owns these files. The state/ folders are RocksDB's and are left alone."""
    removed: list[Path] = []
    if not checkpoint.is_dir():
        return removed
    for query in (q for q in checkpoint.iterdir() if q.is_dir()):
        for folder in (query, query / OFFSETS, query / COMMITS, *sorted((query / "sources").glob("*"))):
            if not folder.is_dir():
                continue
            for f in folder.iterdir():
                if f.is_file() and f.name.startswith(".") and f.name.endswith((".tmp", ".tmp.crc")):
                    f.unlink()
                    removed.append(f)
    return removed


def verify_checkpoint(spark: SparkSession, settings: Settings, store: StoreDefinition) -> None:
    """Raises CheckpointMismatchError when the store's checkpoint disagrees with its tables."""
    checkpoint = Path(settings.checkpoint_path(store.storage))
    paths = {table: settings.table_path(store.storage, table) for table in (CHANGELOG, INTAKE)}
    marker = checkpoint / LINEAGE_FILE
    if not marker.is_file():
        if any(_has_lineage_rows(spark, path) for path in paths.values()):
            written = len(set().union(*(_lineages(spark, path) for path in paths.values())))
            raise _refuse(store.name, f"checkpoint {checkpoint} is missing or lost its {LINEAGE_FILE}, but the "
                                      f"changelog and intake tables hold batches of {written} earlier run(s)")
        return
    try:
        lineage_id, epoch = read_marker(marker)
    except (ValueError, KeyError, OSError) as exc:
        raise _refuse(store.name, f"{marker} is unreadable ({exc})") from exc
    # Cleanup's tombstones (lineage_id deltastate-cleanup/...) are appended beside the stream, not by another lineage.
    newer = _lineages_since(spark, paths[CHANGELOG], epoch, lineage_id)
    if newer:
        qid, e = max(newer.items(), key=lambda item: item[1])
        raise _refuse(store.name, f"checkpoint {checkpoint} (lineage {lineage_id}, epoch {epoch}) is superseded: "
                                  f"the changelog holds epoch {e} from lineage {qid}")
    lineage = Lineage(store.name, lineage_id, epoch, str(checkpoint))
    newest = [b for table, path in paths.items()
              if (b := newest_batch(spark, path, lineage.app_id(table), lineage_id)) is not None]
    # Key-value state lives in Spark's state store; window and session state is in the changelog.
    in_state_store = backend_of(store).spark_state
    _check_query(store.name, checkpoint / QUERY, max(newest, default=None), f"{CHANGELOG}/{INTAKE}",
                 stateful=in_state_store)
    if in_state_store:
        _check_provider(store, checkpoint / QUERY)
