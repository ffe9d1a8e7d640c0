"""The streaming plans of a key-value store: one Kafka source, two queries.

intake     every record, classified: dead letters and one audit row per micro-batch (stateless).
changelog  the valid records folded per key in Spark's native streaming aggregation (RocksDB state,
           update mode: each micro-batch emits exactly the keys it changed, the record cache).
Both queries classify with the same expressions, so a record is either applied or dead-lettered.

A restored store (deltastate restore) adds a second source to the changelog query: a Delta table of
the state rebuilt from the changelog, unioned with the events, each seed row one fold partial
positioned before every event. Keys the seed alone touched are not written back to the changelog.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from deltastate.config import Settings
from deltastate.engine.fold import FoldSpec, event_args, fold_over_args, seed_args
from deltastate.ingest.decode import classify
from deltastate.stores.definition import StoreDefinition


def source_stream(spark: SparkSession, settings: Settings, topic: str,
                  max_offsets_per_trigger: int | None = None, starting_offsets: str = "earliest") -> DataFrame:
    reader = (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", settings.kafka_bootstrap)
              .option("subscribe", topic)
              .option("startingOffsets", starting_offsets)
              .option("failOnDataLoss", "true"))
    if max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    return reader.load()


def seed_stream(spark: SparkSession, seed_path: str) -> DataFrame:
    """The restored state as a streaming source: read whole in the first micro-batch, then idle."""
    return spark.readStream.format("delta").load(seed_path)


def classified_stream(source: DataFrame, settings: Settings, store: StoreDefinition) -> DataFrame:
    return classify(source, store, settings.max_value_bytes)


def changelog_stream(classified: DataFrame, store: StoreDefinition, fold: FoldSpec,
                     seed: DataFrame | None = None) -> DataFrame:
    """Per changed key: the fold result plus the bookkeeping the changelog record needs."""
    # Dead letters share one null group (one state entry in all), whose fold stays empty; the
    # writer drops groups with nothing applied.
    valid = F.col("reason").isNull()
    rows = classified.select(F.when(valid, F.col("key_str")).alias("store_key"), *event_args(store),
                             F.when(valid, F.col("partition")).cast("int").alias("source_partition"),
                             F.when(valid, F.col("kafka_timestamp")).alias("kafka_timestamp"))
    if seed is not None:
        rows = rows.unionByName(seed.select(F.col("key").alias("store_key"), *seed_args(store),
                                            F.col("source_partition").cast("int").alias("source_partition"),
                                            F.lit(None).cast("timestamp").alias("kafka_timestamp")))
    folded = (rows.groupBy("store_key")
              .agg(fold_over_args(fold).alias("fold"),
                   F.max("source_partition").alias("source_partition"),
                   F.max("kafka_timestamp").alias("kafka_timestamp")))
    # A key whose only input so far is its seed row (last position before every offset) has not
    # changed: a null fold makes the writer skip it, as it skips the dead letters' group.
    return folded.select("store_key", F.when(F.col("fold.last_pos") >= 0, F.col("fold")).alias("fold"),
                         "source_partition", "kafka_timestamp")
