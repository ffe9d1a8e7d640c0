package io.deltastate;

import java.util.HashMap;
import java.util.Map;

import org.apache.spark.sql.api.java.UDF4;

/**
 * Stream time as Kafka Streams keeps it, per record: the largest event time of the Kafka partition
 * so far (offset order), including the record's own, and never below the partition's stream time
 * before the micro-batch.
 *
 * Evaluated where the micro-batch is read, with no shuffle: Spark's Kafka source reads each topic
 * partition's offset range in one task, in offset order, so a running maximum kept by the task is
 * the stream time. The instance is per task (Spark deserializes the plan for each task), so its
 * state never crosses tasks or attempts. Records of one partition out of offset order fail the task
 * rather than yield a wrong stream time; the caller checks that no partition spanned two tasks.
 *
 * Arguments: partition, offset, event time (null for a record that does not move stream time: a dead
 * letter or a delete), stream time before the batch (null if none). Returns null while the partition
 * has neither.
 */
public final class StreamTime implements UDF4<Integer, Long, Long, Long, Long> {
    private static final long serialVersionUID = 1L;

    /** Per partition: last offset seen, running maximum (Long.MIN_VALUE = none). */
    private transient Map<Integer, long[]> seen;

    @Override
    public Long call(Integer partition, Long offset, Long eventMs, Long before) {
        if (partition == null || offset == null) {
            throw new IllegalArgumentException("stream time needs the record's partition and offset");
        }
        if (seen == null) {
            seen = new HashMap<>();
        }
        long[] state = seen.computeIfAbsent(partition, p -> new long[] {Long.MIN_VALUE, Long.MIN_VALUE});
        // The same record evaluated twice is harmless (a maximum is idempotent); going back is not.
        if (offset < state[0]) {
            throw new IllegalStateException("stream time: Kafka partition " + partition + " reached offset "
                    + offset + " after offset " + state[0] + " in one task; records must arrive in offset order");
        }
        state[0] = offset;
        if (eventMs != null && eventMs > state[1]) {
            state[1] = eventMs;
        }
        if (state[1] == Long.MIN_VALUE) {
            return before;
        }
        return before == null ? state[1] : Math.max(state[1], before);
    }
}
