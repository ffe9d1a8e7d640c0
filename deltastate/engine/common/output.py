"""The dead letters every store type writes beside its changelog, in the table's own column order, and
the counts a batch's audit row holds (changelog/audit_log.py builds the row)."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from deltastate.changelog import layout
from deltastate.changelog.layout import BATCH_ID, LINEAGE_ID, WRITE_TIME
from deltastate.engine.common.lineage import Lineage

# The counts an audit row holds per partition, in this order: records_in = applied + dead_lettered.
COUNTS = layout.AUDIT_COUNTS


def dead_letter_rows(failed: DataFrame, lineage: Lineage, batch_id: int) -> DataFrame:
    """Classified records that failed (reason set) as rows of the dead-letter table for one batch."""
    return (failed.withColumn("partition", F.col("partition").cast("int"))
            .withColumn("value_size", F.col("value_size").cast("int"))
            .withColumn(BATCH_ID, F.lit(batch_id).cast("bigint"))
            .withColumn(LINEAGE_ID, F.lit(lineage.lineage_id))
            .withColumn(WRITE_TIME, F.current_timestamp())
            .select(*[name for name, _ in layout.DEADLETTER_COLUMNS]))

