"""The streaming plans of a key-value store: one Kafka source, two queries.

intake     every record, classified: dead letters and one audit row per micro-batch (stateless).
changelog  the valid records folded per key in Spark's native streaming aggregation (RocksDB state,
           update mode: each micro-batch emits exactly the keys it changed, the record cache).
Both queries classify with the same expressions, so a record is either applied or dead-lettered.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from deltastate.config import Settings
from deltastate.engine.fold import FoldSpec, fold_call
from deltastate.ingest.decode import classify
from deltastate.stores.definition import StoreDefinition


def source_stream(spark: SparkSession, settings: Settings, topic: str,
                  max_offsets_per_trigger: int | None = None) -> DataFrame:
    reader = (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", settings.kafka_bootstrap)
              .option("subscribe", topic)
              .option("startingOffsets", "earliest")
              .option("failOnDataLoss", "true"))
    if max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    return reader.load()


def classified_stream(source: DataFrame, settings: Settings, store: StoreDefinition) -> DataFrame:
    return classify(source, store, settings.max_value_bytes)


def changelog_stream(classified: DataFrame, store: StoreDefinition, fold: FoldSpec) -> DataFrame:
    """Per changed key: the fold result plus the bookkeeping the changelog record needs."""
    # Dead letters share one null group (one state entry in all), whose fold stays empty; the
    # writer drops groups with nothing applied.
    valid = F.col("reason").isNull()
    return (classified.groupBy(F.when(valid, F.col("key_str")).alias("store_key"))
            .agg(fold_call(store, fold).alias("fold"),
                 F.max(F.when(valid, F.col("partition"))).alias("source_partition"),
                 F.max(F.when(valid, F.col("kafka_timestamp"))).alias("kafka_timestamp")))
