"""A checkpoint's lineage: the identity under which its micro-batches are written to Delta.

Spark restarts batch ids from 0 in a new checkpoint, so a lineage id (txnAppId for idempotent
writes) and an epoch (ordering of a key's changelog records across checkpoints) are kept beside the
checkpoint and created with it: a new checkpoint gets a new id and the next epoch.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import SparkSession

from deltastate.changelog.layout import CHANGELOG, EPOCH
from deltastate.changelog.log_state import column_max
from deltastate.changelog.tables import table_exists
from deltastate.config import Settings
from deltastate.stores.definition import StoreDefinition

LINEAGE_FILE = "lineage.json"


@dataclass(frozen=True)
class Lineage:
    store: str
    lineage_id: str
    epoch: int
    checkpoint: str

    def app_id(self, table: str) -> str:
        return f"deltastate/{self.store}/{table}/{self.lineage_id}"

    def query_checkpoint(self, query: str) -> str:
        return f"{self.checkpoint}/{query}"


def _next_epoch(spark: SparkSession, settings: Settings, store: StoreDefinition) -> int:
    path = settings.table_path(store.storage, CHANGELOG)
    if not table_exists(spark, path):
        return 0
    answered, newest = column_max(path, EPOCH)  # a local log's file statistics: no Spark job
    if answered:
        return 0 if newest is None else int(newest) + 1
    row = spark.read.format("delta").load(path).agg({EPOCH: "max"}).first()
    return 0 if row is None or row[0] is None else int(row[0]) + 1


def read_marker(marker: Path) -> tuple[str, int]:
    """(lineage id, epoch) a checkpoint's lineage file records; ValueError, KeyError, TypeError or
    OSError when it is unreadable."""
    data = json.loads(marker.read_text())
    return str(data["lineage_id"]), int(data["epoch"])


def load_or_create(spark: SparkSession, settings: Settings, store: StoreDefinition) -> Lineage:
    checkpoint = settings.checkpoint_path(store.storage)
    marker = Path(checkpoint) / LINEAGE_FILE
    if marker.is_file():
        lineage_id, epoch = read_marker(marker)
        return Lineage(store.name, lineage_id, epoch, checkpoint)
    lineage = Lineage(store.name, uuid.uuid4().hex, _next_epoch(spark, settings, store), checkpoint)
    marker.parent.mkdir(parents=True, exist_ok=True)
    tmp = marker.with_suffix(".tmp")
    tmp.write_text(json.dumps({"lineage_id": lineage.lineage_id, "epoch": lineage.epoch, "store": store.name}))
    tmp.replace(marker)
    return lineage
