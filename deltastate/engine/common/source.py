"""The Kafka source every store reads, and the name of the store's one streaming query."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession

from deltastate.config import Settings
from deltastate.infra.offset_log import QUERY_FOLDER

QUERY = QUERY_FOLDER  # the store's query: its checkpoint subfolder (every store type)


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
