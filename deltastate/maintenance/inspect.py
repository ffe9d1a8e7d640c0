"""`deltastate inspect STORE`: what a store is on disk, for an operator.

Read-only: the store's definition and state settings, its checkpoint (lineage, epoch, batches,
source offsets and the lag behind the topic's end), its Spark state (rows and bytes per shard, read
through Spark's state data source), its changelog (version, files, bytes, records, dirty ratio), the
retained snapshots and the changelog versions they pin, its dead letters by reason, and how long a
restore would take at the rate the last restore of this store measured.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deltastate.changelog.layout import CHANGELOG, DEADLETTER
from deltastate.changelog.reader import latest_state
from deltastate.changelog.tables import table_exists
from deltastate.config import Settings
from deltastate.engine.common.checkpoint_check import checkpoint_state_provider
from deltastate.engine.common.lineage import LINEAGE_FILE, read_marker
from deltastate.engine.common.source import QUERY
from deltastate.infra.offset_log import committed_batches, planned_batches, stream_source
from deltastate.maintenance.stats import dirty_ratio, table_figures
from deltastate.snapshot.catalog import read_info, read_pointer, snapshot_files, snapshot_name
from deltastate.stores import load_store
from deltastate.stores.backends import backend_of
from deltastate.stores.definition import StoreDefinition

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

RESTORE_RATE_FILE = "restore-rate.json"  # beside the checkpoint: {"records": n, "seconds": s} of the last restore


@dataclass
class StoreInspection:
    store: str
    store_type: str
    topic: str
    state: dict[str, Any] = field(default_factory=dict)
    checkpoint: dict[str, Any] = field(default_factory=dict)
    source: dict[str, Any] = field(default_factory=dict)
    state_shards: list[dict[str, Any]] = field(default_factory=list)
    changelog: dict[str, Any] = field(default_factory=dict)
    snapshots: list[dict[str, Any]] = field(default_factory=list)
    dead_letters: dict[str, int] = field(default_factory=dict)
    restore: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def inspect_store(spark: SparkSession, settings: Settings, store_name: str, *,
                  topic_ends: dict[int, int] | None = None) -> StoreInspection:
    """topic_ends: partition -> end offset of the source topic (read from the broker when None)."""
    store = load_store(settings, store_name)
    checkpoint = Path(settings.checkpoint_path(store.storage))
    backend = backend_of(store)
    out = StoreInspection(store.name, store.type, store.source.topic)
    out.state = _state(store, checkpoint)
    out.checkpoint = _checkpoint(checkpoint)
    topic, offsets = stream_source(checkpoint / QUERY) or (store.source.topic, {})
    ends = topic_ends if topic_ends is not None else _topic_ends(settings, topic)
    out.source = {"topic": topic, "committed_offsets": offsets,
                  "end_offsets": ends,
                  "lag": {p: max(0, ends[p] - offsets.get(p, 0)) for p in sorted(ends)}}
    if backend.spark_state and out.checkpoint["committed_batch"] is not None:
        out.state_shards = _state_shards(spark, store.name, checkpoint / QUERY, out.checkpoint["committed_batch"])
    out.changelog = _changelog(spark, settings, store)
    out.snapshots = _snapshots(settings, store.name)
    out.dead_letters = _dead_letters(spark, settings, store)
    out.restore = (_restore_estimate(checkpoint, out.changelog.get("live_keys")) if backend.has_changelog
                   else {"measured": False, "mode": "replay", "note": UNLOGGED_NOTE})
    return out


def _state(store: StoreDefinition, checkpoint: Path) -> dict[str, Any]:
    backend = backend_of(store)
    if not backend.spark_state:
        return {"kept_in": "changelog", "note": "window and session state is read from the changelog"}
    capacities = backend.partition_capacities(store)
    lru = {} if capacities is None else {"max_entries": store.max_entries, "per_partition": list(capacities)}
    return {"kept_in": "spark state store", "provider": store.state.provider, **lru,
            "provider_class": store.state.provider_class,
            "checkpoint_provider_class": checkpoint_state_provider(str(checkpoint / QUERY)),
            "settings": {k: v for k, v in store.state.spark_conf().items() if v is not None}}


def _checkpoint(checkpoint: Path) -> dict[str, Any]:
    lineage_id, epoch = None, None
    if (checkpoint / LINEAGE_FILE).is_file():
        try:
            lineage_id, epoch = read_marker(checkpoint / LINEAGE_FILE)
        except (ValueError, KeyError, TypeError):  # a damaged lineage file: shown as unknown, not refused
            pass
    planned, committed = planned_batches(checkpoint / QUERY), committed_batches(checkpoint / QUERY)
    # The report's own field names, which happen to be the changelog's column names.
    return {"path": str(checkpoint), "exists": checkpoint.is_dir(), "lineage_id": lineage_id,
            "epoch": epoch, "planned_batch": planned[-1] if planned else None,
            "committed_batch": committed[-1] if committed else None}


def _topic_ends(settings: Settings, topic: str) -> dict[int, int]:
    from deltastate.infra.topics import end_offsets

    return end_offsets(settings.kafka_bootstrap, topic, timeout=15)


def _state_shards(spark: SparkSession, store: str, query: Path, batch_id: int) -> list[dict[str, Any]]:
    """Rows per shard from Spark's state data source; bytes from the shard's checkpoint files."""
    from deltastate.engine.keyvalue.state_read import check_state_files, state_store_reader  # pyspark when read

    check_state_files(store, str(query), batch_id)
    rows = {int(r["partition_id"]): int(r["count"]) for r in
            state_store_reader(spark).load(str(query)).groupBy("partition_id").count().collect()}
    shards = []
    for shard in sorted((p for p in (query / "state" / "0").iterdir() if p.name.isdigit()), key=lambda p: int(p.name)):
        size = sum(f.stat().st_size for f in shard.rglob("*") if f.is_file())
        shards.append({"shard": int(shard.name), "rows": rows.get(int(shard.name), 0), "bytes": size})
    return shards


UNLOGGED_NOTE = ("changelog.enabled: false: the state lives only in the Spark state store; restore replays "
                 "the source topic (records past the topic's retention are lost), fresh reads are refused, "
                 "snapshots read the state store")


def _changelog(spark: SparkSession, settings: Settings, store: StoreDefinition) -> dict[str, Any]:
    path = settings.table_path(store.storage, CHANGELOG)
    if not backend_of(store).has_changelog:
        return {"path": path, "enabled": False, "note": UNLOGGED_NOTE}
    if not table_exists(spark, path):
        return {"path": path, "exists": False}
    fig = table_figures(spark, path)
    live = latest_state(spark, settings, store, fig.version).count()
    return {"path": path, "exists": True, "version": fig.version, "files": fig.files, "bytes": fig.bytes,
            "records": fig.records, "live_keys": live, "dirty_ratio": round(dirty_ratio(fig.records - live, fig.records), 4)}


def _snapshots(settings: Settings, store: str) -> list[dict[str, Any]]:
    current = read_pointer(settings)
    out = []
    for version in sorted(snapshot_files(settings)):
        info = read_info(settings.snapshots_dir / snapshot_name(version))
        held = info.store(store)
        out.append({"snapshot_version": version, "current": snapshot_name(version) == current,
                    "changelog_version": None if held is None else held.changelog_version,
                    "rows": None if held is None else held.row_count})
    return out


def _dead_letters(spark: SparkSession, settings: Settings, store: StoreDefinition) -> dict[str, int]:
    path = settings.table_path(store.storage, DEADLETTER)
    if not table_exists(spark, path):
        return {}
    from pyspark.sql import functions as F

    # A reason is "<category>: <detail>"; operators count by category.
    by_category = (spark.read.format("delta").load(path)
                   .groupBy(F.substring_index("reason", ":", 1).alias("category")).count().collect())
    return {r["category"]: int(r["count"]) for r in by_category}


def record_restore_rate(checkpoint: str, records: int, seconds: float) -> None:
    """Kept beside the checkpoint by restore, so inspect can estimate the next one."""
    path = Path(checkpoint) / RESTORE_RATE_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"records": records, "seconds": seconds}))


def _restore_estimate(checkpoint: Path, live_keys: int | None) -> dict[str, Any]:
    measured = checkpoint / RESTORE_RATE_FILE
    if not measured.is_file():
        return {"measured": False, "note": "no restore of this store measured yet (deltastate restore records one)"}
    data = json.loads(measured.read_text())
    rate = data["records"] / data["seconds"] if data["seconds"] > 0 else None
    estimate = None if rate in (None, 0) or live_keys is None else round(live_keys / rate, 1)
    return {"measured": True, "records_per_s": None if rate is None else round(rate, 1),
            "live_keys": live_keys, "estimated_seconds": estimate}
