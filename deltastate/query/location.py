"""Where a key lives, as Kafka Streams' queryMetadataForKey answers it: the topic the store's stream
reads, that topic's partition count, and the partition the producer's murmur2 places the key on.

The topic comes from the store's checkpoint (Spark's offset log of its newest finished batch), not
from the declaration alone: a run may read another topic (`deltastate run --topic`), with another
partition count. Plain Python: the query service loads no pyspark."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from deltastate.changelog.deltalog import local_dir
from deltastate.config import Settings
from deltastate.infra.offset_log import QUERY_FOLDER, stream_source
from deltastate.ingest.partitioner import partition_for
from deltastate.stores.definition import StoreDefinition


@dataclass(frozen=True)
class StreamTopic:
    topic: str
    partitions: int


@dataclass(frozen=True)
class KeyLocation:
    topic: str
    partitions: int
    partition: int


def stream_topic(settings: Settings, store: StoreDefinition) -> StreamTopic:
    """The topic the store's stream reads and its partition count; the declared source before a batch
    finished, or when the checkpoint is not on a local path."""
    root = local_dir(settings.checkpoint_path(store.storage))
    try:
        found = None if root is None else stream_source(Path(root) / QUERY_FOLDER)
    except (OSError, ValueError):  # an entry Spark is still writing, or one cleaned away as it was read
        found = None
    if not found or not found[1]:
        return StreamTopic(store.source.topic, store.source.partitions)
    topic, offsets = found
    return StreamTopic(topic, len(offsets))


def locate(settings: Settings, store: StoreDefinition, key: str) -> KeyLocation:
    source = stream_topic(settings, store)
    return KeyLocation(source.topic, source.partitions, partition_for(key, source.partitions))
