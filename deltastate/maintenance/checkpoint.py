"""Does a store's Spark checkpoint agree with its changelog? Checked before every run.

Spark trusts its checkpoint: started on a checkpoint that lost its lineage, its metadata or its
newest batches, it would replay the topic from the wrong place and count events again (or skip
them) without a word. The changelog and the intake audit record which lineage wrote which batch,
so a checkpoint can be held against them; on any disagreement the run is refused with the command
that fixes it (`deltastate restore <store>`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from deltastate.changelog.layout import CHANGELOG, INTAKE, is_windowed
from deltastate.changelog.tables import table_exists
from deltastate.config import Settings
from deltastate.engine.lineage import LINEAGE_FILE
from deltastate.engine.plan import QUERY
from deltastate.errors import CheckpointMismatchError
from deltastate.stores.definition import StoreDefinition

# Query folders of deltastate's earlier key-value engine (one intake and one changelog query).
TWO_QUERY_FOLDERS = ("intake", "changelog")


@dataclass(frozen=True)
class TableBatches:
    """Per lineage (query_id) of one table: its epoch (changelog only) and newest batch id."""

    rows: dict[str, tuple[int | None, int]]

    def newest_batch(self, lineage_id: str) -> int | None:
        found = self.rows.get(lineage_id)
        return None if found is None else found[1]


def _table_batches(spark: SparkSession, path: str, with_epoch: bool) -> TableBatches:
    if not table_exists(spark, path):
        return TableBatches({})
    df = spark.read.format("delta").load(path).where(F.col("query_id").isNotNull())
    epoch = F.max("epoch") if with_epoch else F.lit(None).cast("int")
    rows = df.groupBy("query_id").agg(epoch.alias("epoch"), F.max("batch_id").alias("batch")).collect()
    return TableBatches({r["query_id"]: (None if r["epoch"] is None else int(r["epoch"]), int(r["batch"]))
                         for r in rows})


def _batch_ids(folder: Path) -> list[int]:
    return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit()) if folder.is_dir() else []


def query_started(query_checkpoint: str) -> bool:
    folder = Path(query_checkpoint)
    return (folder / "metadata").is_file() or bool(_batch_ids(folder / "offsets"))


def any_query_started(checkpoint: str) -> bool:
    folder = Path(checkpoint)
    return folder.is_dir() and any(query_started(str(q)) for q in folder.iterdir() if q.is_dir())


def _refuse(store: str, problem: str) -> CheckpointMismatchError:
    return CheckpointMismatchError(
        f"store {store!r}: {problem}. Running on it would lose or double-count events; rebuild the "
        f"checkpoint from the changelog with `deltastate restore {store}`, then run again")


def _check_query(store: str, folder: Path, newest_in_table: int | None, table: str, stateful: bool) -> None:
    """One query's checkpoint folder against the newest batch its lineage wrote to its table."""
    offsets, commits = _batch_ids(folder / "offsets"), _batch_ids(folder / "commits")
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
        if offsets and not (folder / "offsets" / str(offsets[-1])).read_text().startswith("v"):
            raise ValueError(f"offsets/{offsets[-1]} is not an offset log entry")
    except (ValueError, KeyError, OSError) as exc:
        raise _refuse(store, f"checkpoint {folder} is unreadable ({exc})") from exc
    if newest_in_table is not None and (not offsets or newest_in_table > offsets[-1]):
        raise _refuse(store, f"checkpoint {folder} is older than the {table} table: it planned batches up to "
                             f"{offsets[-1] if offsets else 'none'}, the table holds batch {newest_in_table} "
                             "of the same lineage")
    if stateful and commits and not _state_present(folder / "state" / "0"):
        raise _refuse(store, f"checkpoint {folder} committed batch {commits[-1]} but its state "
                             f"folder {folder / 'state' / '0'} is missing or empty")


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
        for folder in (query, query / "offsets", query / "commits", *sorted((query / "sources").glob("*"))):
            if not folder.is_dir():
                continue
            for f in folder.iterdir():
                if f.is_file() and f.name.startswith(".") and f.name.endswith((".tmp", ".tmp.crc")):
                    f.unlink()
                    removed.append(f)
    return removed


def verify_checkpoint(spark: SparkSession, settings: Settings, store: StoreDefinition) -> None:
    """Raises CheckpointMismatchError when the store's checkpoint disagrees with its tables."""
    checkpoint = Path(settings.checkpoint_path(store.name))
    changelog = _table_batches(spark, settings.table_path(store.name, CHANGELOG), with_epoch=True)
    intake = _table_batches(spark, settings.table_path(store.name, INTAKE), with_epoch=False)
    marker = checkpoint / LINEAGE_FILE
    if not marker.is_file():
        written = len(changelog.rows) + len(intake.rows)
        if written:
            raise _refuse(store.name, f"checkpoint {checkpoint} is missing or lost its {LINEAGE_FILE}, but the "
                                      f"changelog and intake tables hold batches of {written} earlier run(s)")
        return
    try:
        data = json.loads(marker.read_text())
        lineage_id, epoch = str(data["lineage_id"]), int(data["epoch"])
    except (ValueError, KeyError, OSError) as exc:
        raise _refuse(store.name, f"{marker} is unreadable ({exc})") from exc
    # Cleanup's tombstones (query_id deltastate-cleanup/...) are appended beside the stream, not by another lineage.
    newer = {qid: e for qid, (e, _) in changelog.rows.items()
             if qid != lineage_id and not qid.startswith("deltastate-cleanup/") and e is not None and e >= epoch}
    if newer:
        qid, e = max(newer.items(), key=lambda item: item[1])
        raise _refuse(store.name, f"checkpoint {checkpoint} (lineage {lineage_id}, epoch {epoch}) is superseded: "
                                  f"the changelog holds epoch {e} from lineage {qid}")
    two_query = [name for name in TWO_QUERY_FOLDERS if query_started(str(checkpoint / name))]
    if two_query:
        raise CheckpointMismatchError(
            f"store {store.name!r}: checkpoint {checkpoint} holds the {' and '.join(two_query)} queries of "
            "deltastate's earlier two-query engine, which this engine cannot continue; replay the topic into "
            "a new storage root (DELTASTATE_STORAGE)")
    newest = [b for b in (changelog.newest_batch(lineage_id), intake.newest_batch(lineage_id)) if b is not None]
    # Key-value state lives in Spark's state store; window and session state is in the changelog.
    _check_query(store.name, checkpoint / QUERY, max(newest, default=None), f"{CHANGELOG}/{INTAKE}",
                 stateful=not is_windowed(store))
