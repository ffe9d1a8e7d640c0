"""The streaming query of a key-value store: Kafka (and, after a restore, the seed of restored
state) through the store's fold in Spark's state store, written by the key-value batch writer."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import DataStreamWriter

from deltastate.changelog.batch_commit import BatchCommitter
from deltastate.config import Settings
from deltastate.engine.common.lineage import Lineage
from deltastate.engine.common.report import BatchListener
from deltastate.engine.common.resume import ResumePlan
from deltastate.engine.common.source import QUERY
from deltastate.engine.keyvalue.fold import register_fold
from deltastate.engine.keyvalue.lru import lru_stream
from deltastate.engine.keyvalue.plan import classified_stream, seed_stream, store_stream
from deltastate.engine.keyvalue.writer import store_writer
from deltastate.stores.backends import backend_of
from deltastate.stores.definition import StoreDefinition


def start_keyvalue(spark: SparkSession, settings: Settings, store: StoreDefinition, lineage: Lineage,
                   source: DataFrame, topic: str, listener: BatchListener,
                   resume: ResumePlan | None, committer: BatchCommitter) -> DataStreamWriter:
    """The store's query, ready for a trigger and start()."""
    fold = register_fold(spark, store)
    seed = seed_stream(spark, resume.seed_path) if resume is not None and resume.seed_path else None
    classified = classified_stream(source, settings, store)
    plan = lru_stream if backend_of(store).evicts else store_stream
    return (plan(classified, store, fold, seed).writeStream.queryName(f"{store.name}-{QUERY}")
            .option("checkpointLocation", lineage.query_checkpoint(QUERY))
            .outputMode("update").foreachBatch(store_writer(spark, settings, store, fold, lineage, topic, committer, listener)))
