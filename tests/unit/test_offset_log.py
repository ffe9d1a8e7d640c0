"""Spark's checkpoint offset log as infra/offset_log.py reads it: batch ids, the pinned conf, the
batch's start and the Kafka source's offsets beside a restored store's seed source."""

from __future__ import annotations

import json
from pathlib import Path

from deltastate.infra.offset_log import (
    SHUFFLE_PARTITIONS,
    committed_batches,
    newest_committed,
    newest_planned,
    planned_batches,
    read_entry,
)

META = {"batchWatermarkMs": 0, "batchTimestampMs": 1_700_000_000_000,
        "conf": {SHUFFLE_PARTITIONS: "4", "spark.sql.streaming.stateStore.providerClass": "P"}}


def _entry(query: Path, batch: int, *sources: str) -> None:
    (query / "offsets").mkdir(parents=True, exist_ok=True)
    (query / "offsets" / str(batch)).write_text("\n".join(["v1", json.dumps(META), *sources]))


def test_batches_skip_spark_temp_files(tmp_path: Path) -> None:
    query = tmp_path / "stream"
    for batch in (0, 1, 2):
        _entry(query, batch, json.dumps({"t": {"0": batch}}))
    (query / "offsets" / ".3.5f1e.tmp").write_text("")
    (query / "commits").mkdir()
    (query / "commits" / "0").write_text("v1\n{}")
    (query / "commits" / ".1.crc").write_text("")
    assert planned_batches(query) == [0, 1, 2] and committed_batches(query) == [0]
    assert newest_planned(query).batch_id == 2 and newest_committed(query).batch_id == 0
    assert planned_batches(tmp_path / "missing") == [] and newest_planned(tmp_path / "missing") is None


def test_entry_fields(tmp_path: Path) -> None:
    query = tmp_path / "stream"
    seed = json.dumps({"sourceVersion": 1, "reservoirId": "r", "reservoirVersion": 3, "index": -1})
    _entry(query, 5, seed, json.dumps({"game-results": {"1": 40, "0": 12}}))
    entry = read_entry(query, 5)
    assert entry.version == "v1" and entry.timestamp_ms == 1_700_000_000_000
    assert entry.conf[SHUFFLE_PARTITIONS] == "4"
    assert entry.kafka_offsets() == ("game-results", {0: 12, 1: 40})
    _entry(query, 6, "-")
    assert read_entry(query, 6).kafka_offsets() is None
