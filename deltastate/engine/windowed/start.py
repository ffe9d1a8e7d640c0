"""The streaming query of a window or session store: one query whose micro-batches batch.py applies.

Unlike key-value stores (Spark's state store), these stores keep their state in the changelog and
decide lateness per record from per-partition stream time, Kafka Streams' rule; both need the whole
micro-batch at once, so the one query classifies, merges and writes in foreachBatch.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import DataStreamWriter

from deltastate.changelog.audit_log import BatchCommitter
from deltastate.config import Settings
from deltastate.engine.common.lineage import Lineage
from deltastate.engine.common.report import BatchListener
from deltastate.engine.common.resume import ResumePlan
from deltastate.engine.common.source import QUERY
from deltastate.engine.windowed.batch import windowed_writer
from deltastate.ingest.decode import classify
from deltastate.stores.definition import StoreDefinition


def start_windowed(spark: SparkSession, settings: Settings, store: StoreDefinition, lineage: Lineage,
                   source: DataFrame, topic: str, listener: BatchListener,
                   resume: ResumePlan | None, committer: BatchCommitter) -> DataStreamWriter:
    """The store's query, ready for a trigger and start(). Its state is the changelog, so a restore
    plan only moves where Kafka is read from (run.py), never seeds state."""
    classified = classify(source, store, settings.max_value_bytes)
    return (classified.writeStream.queryName(f"{store.name}-{QUERY}")
            .option("checkpointLocation", lineage.query_checkpoint(QUERY))
            .outputMode("append").foreachBatch(windowed_writer(settings, store, lineage, committer, listener)))
