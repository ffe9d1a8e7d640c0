"""RocksDB's memtables, read from the state store providers Spark holds (RocksDbMemory.java): a
running query's checkpoint has a figure within Spark's own total of the state store's memory; a
checkpoint nobody runs has none."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from deltastate.metrics.runs import memtable_bytes

pytestmark = pytest.mark.integration


def test_memtables_of_a_running_query(spark, tmp_path: Path) -> None:
    source = tmp_path / "in"
    source.mkdir()
    (source / "a.json").write_text("".join(f'{{"k": "key-{i % 500}"}}\n' for i in range(5_000)))
    checkpoint = str(tmp_path / "checkpoint")
    query = (spark.readStream.schema("k string").json(str(source)).groupBy("k").count()
             .writeStream.format("memory").queryName(f"memtables_{uuid.uuid4().hex[:8]}").outputMode("update")
             .option("checkpointLocation", checkpoint).start())
    try:
        query.processAllAvailable()
        [operator] = query.lastProgress["stateOperators"]
        assert operator["numRowsTotal"] == 500
        held = memtable_bytes(spark, checkpoint)
        # Spark's memoryUsedBytes adds the memtables to the block cache and the table readers.
        assert 0 <= held <= operator["memoryUsedBytes"], (held, operator)
        assert memtable_bytes(spark, f"file://{checkpoint}") == held  # the same folder as a URI
        assert memtable_bytes(spark, str(tmp_path / "elsewhere")) == -1
        assert memtable_bytes(spark, checkpoint + "-other") == -1  # a sibling whose name starts the same
    finally:
        query.stop()
