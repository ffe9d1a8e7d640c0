package io.deltastate;

import org.apache.spark.sql.delta.DeltaLog;
import org.apache.spark.sql.delta.Snapshot;
import org.apache.spark.sql.delta.TruncationGranularity$;
import scala.Option;

/**
 * Delta's own expired-log cleanup, with the retention given per call and the cutoff truncated to the
 * minute.
 *
 * Delta runs the cleanup only after a checkpoint written inside a commit, with the table's
 * delta.logRetentionDuration and the cutoff truncated to the previous midnight. A deltastate table
 * checkpoints beside its stream and needs a cutoff that also stays before the commits a reader still
 * needs (audits not yet copied, the commits after the published snapshot), so the caller computes
 * the retention. The entry point taking both is package-private in Scala, public in bytecode; this
 * class is the one place that calls it, and passes the retention boxed as the Long it expects (py4j
 * would box a small number as an Integer).
 */
public final class LogCleanup {
    private LogCleanup() {}

    /**
     * Deletes the table's commit, checksum and checkpoint files older than retentionMillis (the cutoff
     * truncated down to the minute) and older than the newest checkpoint, always keeping a checkpoint
     * from which every retained version can be read.
     */
    public static void cleanUpExpiredLogs(DeltaLog log, Snapshot snapshot, long retentionMillis) {
        log.cleanUpExpiredLogs(snapshot, Option.empty(), Option.apply((Object) Long.valueOf(retentionMillis)),
                TruncationGranularity$.MODULE$.MINUTE());
    }
}
