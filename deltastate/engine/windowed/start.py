"""The streaming query of a window or session store: one query whose micro-batches batch.py applies.

Unlike key-value stores (a stateful operator in the query's plan), these stores decide lateness per
record from per-partition stream time, Kafka Streams' rule, and merge windows and sessions against
their live entries (live_store.py: a state store of their own, written from the batch); both need
the whole micro-batch at once, so the one query classifies, merges and writes in foreachBatch.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import DataStreamWriter

from deltastate.changelog.batch_commit import BatchCommitter
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
    """The store's query, ready for a trigger and start(). A restore plan only moves where Kafka is
    read from (run.py): the live entries are seeded from the changelog by the first batch."""
    classified = classify(source, store, settings.max_value_bytes)
    return (classified.writeStream.queryName(f"{store.name}-{QUERY}")
            .option("checkpointLocation", lineage.query_checkpoint(QUERY))
            .outputMode("append").foreachBatch(windowed_writer(spark, settings, store, lineage, committer, listener)))
