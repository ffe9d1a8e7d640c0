package io.deltastate;

import io.delta.kernel.Table;
import io.delta.kernel.defaults.engine.DefaultEngine;
import io.delta.kernel.engine.Engine;
import io.delta.kernel.exceptions.CheckpointAlreadyExistsException;
import java.io.IOException;
import org.apache.hadoop.conf.Configuration;

/**
 * A table's Delta checkpoint written by Delta Kernel in the calling thread.
 *
 * Delta Spark writes a checkpoint from the snapshot's reconstructed state: a Spark job over the
 * table's log ("Compute snapshot for version N"), then a second job writing the Parquet file, both
 * scheduled on the executors the stream's micro-batches run on. Kernel replays the same log (the
 * newest checkpoint and the commits after it) in this thread: no task slot is taken from a running
 * batch. The file is a classic single-file checkpoint that Delta Spark, Kernel-based readers and
 * deltastate's own log readers read alike (add.stats as JSON, without the parsed stats columns, which
 * Delta Spark fills from the JSON when it wants them). Kernel keeps the removes of the commits it
 * replays but not the tombstones of the checkpoint it starts from: the caller
 * (deltastate/changelog/checkpoints.py) uses it only when that checkpoint holds none.
 */
public final class KernelCheckpoint {
    private KernelCheckpoint() {}

    /** Writes the checkpoint of `version`; false when one exists already (a concurrent writer's). */
    public static boolean write(Configuration hadoopConf, String path, long version) throws IOException {
        Engine engine = DefaultEngine.create(hadoopConf);
        try {
            Table.forPath(engine, path).checkpoint(engine, version);
            return true;
        } catch (CheckpointAlreadyExistsException exists) {
            return false;
        }
    }
}
