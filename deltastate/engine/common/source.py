"""The Kafka source every store reads, and the name of the store's one streaming query."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession

from deltastate.config import Settings
from deltastate.infra.offset_log import QUERY_FOLDER

QUERY = QUERY_FOLDER  # the store's query: its checkpoint subfolder (every store type)

# Spark's Kafka reader looks up the partition's earliest and latest offsets (two requests to the
# broker) after every poll, and a consumer's poll returns at most max.poll.records (500 by default):
# a backlog paid those lookups every 500 records. A poll here returns what one fetch brought, and a
# fetch brings up to 8 MB of a partition (one consumer per partition, so 8 MB of buffer each).
# A micro-batch of a few records is unaffected: a poll returns what is there.
CONSUMER_OPTIONS = {"kafka.max.poll.records": "100000", "kafka.max.partition.fetch.bytes": str(8 << 20)}


def source_stream(spark: SparkSession, settings: Settings, topic: str,
                  max_offsets_per_trigger: int | None = None, starting_offsets: str = "earliest") -> DataFrame:
    reader = (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", settings.kafka_bootstrap)
              .option("subscribe", topic)
              .option("startingOffsets", starting_offsets)
              .option("failOnDataLoss", "true")
              .options(**CONSUMER_OPTIONS))
    if max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    return reader.load()
