"""The dead letters every store type writes beside its changelog, in the table's own column order, and
the counts a batch's audit row holds (changelog/audit_log.py builds the row)."""

from __future__ import annotations

from pyspark.sql import DataFrame
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

