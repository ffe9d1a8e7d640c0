"""The per-batch rows every store type writes beside its changelog: the audit row (counts, offsets
and stream times per source partition) and the dead letters, in the tables' own column order."""

from __future__ import annotations

import json

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from deltastate.changelog import layout
from deltastate.engine.common.lineage import Lineage

# The counts an audit row holds per partition, in this order: records_in = applied + dead_lettered.
COUNTS = ("records_in", "applied", "dead_lettered", "tombstones")


def dead_letter_rows(failed: DataFrame, lineage: Lineage, batch_id: int) -> DataFrame:
    """Classified records that failed (reason set) as rows of the dead-letter table for one batch."""
    return (failed.withColumn("partition", F.col("partition").cast("int"))
            .withColumn("value_size", F.col("value_size").cast("int"))
            .withColumn("batch_id", F.lit(batch_id).cast("bigint"))
            .withColumn("lineage_id", F.lit(lineage.lineage_id))
            .withColumn("write_time", F.current_timestamp())
            .select(*[name for name, _ in layout.DEADLETTER_COLUMNS]))


def by_partition(values: dict) -> str:
    """JSON {partition: value} as the audit table holds it (tuples as lists, partitions in order)."""
    return json.dumps({str(p): list(v) if isinstance(v, tuple) else v for p, v in sorted(values.items())})


def audit_row(spark: SparkSession, lineage_id: str, batch_id: int, counts: dict[int, tuple[int, int, int, int]],
              offsets: dict[int, tuple[int, int]], stream_times: dict[int, int], totals_before: str,
              late: int = 0) -> DataFrame:
    """One batch's audit row. counts: partition -> (records_in, applied, dead_lettered, tombstones);
    offsets: partition -> (lo, hi) covered; stream_times: partition -> newest applied event time;
    totals_before: JSON of what the writer carried into the batch (layout.INTAKE_COLUMNS)."""
    records_in, applied, dead, tombstones = (sum(c[i] for c in counts.values()) for i in range(4))
    return spark.createDataFrame(
        [(lineage_id, batch_id, records_in, applied, dead, tombstones, by_partition(offsets), late,
          by_partition(stream_times), by_partition(counts), totals_before)],
        "lineage_id string, batch_id bigint, records_in bigint, applied bigint, dead_lettered bigint, "
        "tombstones bigint, offsets string, late bigint, stream_times string, partition_counts string, "
        "totals_before string",
    ).withColumn("write_time", F.current_timestamp()).select(*[n for n, _ in layout.INTAKE_COLUMNS])
