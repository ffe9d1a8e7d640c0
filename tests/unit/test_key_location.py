"""Where a key lives (the REST metadata answer): the topic and partition count the store's stream
reads, from Spark's offset log of its newest finished batch in a hand-written checkpoint, and the
declared source before any batch finished. The partition is checked against the murmur2 partitioner's
own answer for that partition count."""

from __future__ import annotations

import json
from pathlib import Path

from deltastate.config import load_settings
from deltastate.infra.offset_log import QUERY_FOLDER
from deltastate.ingest.partitioner import partition_for
from deltastate.query.location import locate, stream_topic
from deltastate.stores import load_store


def finished_batch(query: Path, batch_id: int, sources: list[str]) -> None:
    for folder in ("offsets", "commits"):
        (query / folder).mkdir(parents=True, exist_ok=True)
    meta = json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": 1, "conf": {}})
    (query / "offsets" / str(batch_id)).write_text("\n".join(["v1", meta, *sources]))
    (query / "commits" / str(batch_id)).write_text('v1\n{"nextBatchWatermarkMs":0}')


def test_before_a_batch_the_declared_topic(tmp_path: Path) -> None:
    settings = load_settings({"DELTASTATE_HOME": str(tmp_path)})
    store = load_store(settings, "player_stats")
    found = stream_topic(settings, store)
    assert (found.topic, found.partitions) == (store.source.topic, store.source.partitions)


def test_the_topic_the_run_read_with_its_partition_count(tmp_path: Path) -> None:
    settings = load_settings({"DELTASTATE_HOME": str(tmp_path)})
    store = load_store(settings, "player_stats")
    query = Path(settings.checkpoint_path(store.storage)) / QUERY_FOLDER
    # A run on --topic other-7 (7 partitions, the declared topic has 4); a restored store's seed line
    # (a Delta source) comes first.
    offsets = {str(p): 10 + p for p in range(7)}
    finished_batch(query, 0, ['{"sourceVersion":1,"reservoirId":"x","reservoirVersion":3,"index":-1}',
                              json.dumps({"other-7": offsets})])
    found = stream_topic(settings, store)
    assert (found.topic, found.partitions) == ("other-7", 7) != (store.source.topic, store.source.partitions)
    for key in ("player-000001", "player-000123", "tie-a"):
        where = locate(settings, store, key)
        assert (where.topic, where.partitions, where.partition) == ("other-7", 7, partition_for(key, 7))
    # A batch planned but not finished does not count: the newest finished one does.
    (query / "offsets" / "1").write_text("v1\n{}\n" + json.dumps({"third-topic": {"0": 1}}))
    assert stream_topic(settings, store).topic == "other-7"
