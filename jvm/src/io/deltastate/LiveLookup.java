package io.deltastate;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.Collections;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Set;

import org.apache.spark.TaskContext;
import org.apache.spark.rdd.RDD;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.expressions.JoinedRow;
import org.apache.spark.sql.catalyst.expressions.SortOrder;
import org.apache.spark.sql.catalyst.expressions.UnsafeProjection;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.catalyst.plans.physical.HashPartitioning;
import org.apache.spark.sql.catalyst.types.DataTypeUtils;
import org.apache.spark.sql.classic.SparkSession;
import org.apache.spark.sql.execution.LogicalRDD;
import org.apache.spark.sql.execution.streaming.state.ReadStateStore;
import org.apache.spark.sql.execution.streaming.state.StateStore;
import org.apache.spark.sql.execution.streaming.state.StateStoreThreadLocalTracker;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.util.TaskCompletionListener;
import scala.Option;
import scala.collection.Iterator;
import scala.jdk.javaapi.CollectionConverters;
import scala.runtime.AbstractFunction2;

/**
 * A left join of rows keyed like the live entries (key, window_start, window_end first) with the
 * entries they name, by one point lookup each, inside the task that holds the rows: no shuffle of
 * the state, no join. Rows partitioned by key into the state's partitions stay where they are, and
 * the join's output says so, so a merge over it and LiveEntryStore.writeThrough run in the same
 * task: Spark upgrades the task's read store to its write store (as its own streaming aggregation
 * does between restoring and saving state), and the batch's state work is one stage.
 */
public final class LiveLookup {
    private LiveLookup() {}

    /** The read stores a task's write upgraded, so their lookups leave them to the write's commit. */
    private static final ThreadLocal<Set<ReadStateStore>> UPGRADED =
        ThreadLocal.withInitial(() -> Collections.newSetFromMap(new IdentityHashMap<>()));

    /**
     * rows (key, window_start, window_end, then any columns) with the values of the entry each
     * names at version appended as prefix + the value's name: null when no entry is live, or when
     * its retained column (1 window_start, 2 window_end; 0 none) is at or below horizon. rows not
     * already partitioned by key into `partitions` are shuffled there first. The output is declared
     * partitioned by key, so writeThrough at the same version runs in the same tasks; a task whose
     * store no write upgraded releases it when it ends.
     */
    public static Dataset<Row> join(Dataset<Row> rows, StructType values, String prefix, String dir, String runId,
                                    long version, int partitions, int retainedColumn, long horizon) {
        // Spark plans no shuffle for this when rows already are partitioned so (EnsureRequirements
        // drops a repartition its input satisfies).
        org.apache.spark.sql.classic.Dataset<Row> part = (org.apache.spark.sql.classic.Dataset<Row>)
            rows.repartition(partitions, rows.col(rows.columns()[0]));
        SparkSession spark = part.sparkSession();
        StructType out = part.schema();
        for (StructField f : values.fields()) {
            out = out.add(prefix + f.name(), f.dataType(), true);
        }
        RDD<InternalRow> joined = LiveEntryStore.withReadStateStore(
            part.queryExecution().toRdd(), spark, LiveEntryStore.stateInfo(dir, runId, version, partitions), values,
            new Join(values.length(), retainedColumn, horizon));
        List<Attribute> attributes = new ArrayList<>(CollectionConverters.asJava(DataTypeUtils.toAttributes(out)));
        List<Expression> key = new ArrayList<>();
        key.add(attributes.get(0));
        LogicalRDD plan = new LogicalRDD(CollectionConverters.asScala(attributes).toList(), joined,
            new HashPartitioning(CollectionConverters.asScala(key).toList(), partitions),
            scala.collection.immutable.List$.MODULE$.<SortOrder>empty(), false, Option.empty(), spark,
            Option.empty(), Option.empty());
        return org.apache.spark.sql.classic.Dataset$.MODULE$.ofRows(spark, plan);
    }

    /** Called by a write with its store: marks the task's read store as upgraded to it. */
    static void written(StateStore store) {
        Option<ReadStateStore> read = StateStoreThreadLocalTracker.getStore();
        if (read.isDefined() && read.get() == store) {
            UPGRADED.get().add(read.get());
        }
    }

    /** One partition's rows, each joined with its entry's values as it is handed on. */
    private static final class Join
            extends AbstractFunction2<ReadStateStore, Iterator<InternalRow>, Iterator<InternalRow>> implements Serializable {
        private final int valueCount;
        private final int retainedColumn;
        private final long horizon;

        Join(int valueCount, int retainedColumn, long horizon) {
            this.valueCount = valueCount;
            this.retainedColumn = retainedColumn;
            this.horizon = horizon;
        }

        @Override
        public Iterator<InternalRow> apply(ReadStateStore store, Iterator<InternalRow> rows) {
            // A store no write upgraded is released when the task ends; an upgraded one is the
            // write's to commit or abort.
            TaskContext.get().addTaskCompletionListener(new TaskCompletionListener() {
                @Override
                public void onTaskCompletion(TaskContext context) {
                    if (!UPGRADED.get().remove(store)) {
                        store.release();
                    }
                }
            });
            UnsafeProjection keyOf = UnsafeProjection.create(LiveEntryStore.KEY_SCHEMA);
            GenericInternalRow missing = new GenericInternalRow(valueCount);
            JoinedRow joined = new JoinedRow();
            return new scala.collection.AbstractIterator<InternalRow>() {
                @Override
                public boolean hasNext() {
                    return rows.hasNext();
                }

                @Override
                public InternalRow next() {
                    InternalRow row = rows.next();
                    long start = row.getLong(1);
                    long end = row.getLong(2);
                    boolean retained = retainedColumn == 0 || (retainedColumn == 1 ? start : end) > horizon;
                    UnsafeRow value = retained ? store.get(keyOf.apply(new GenericInternalRow(new Object[] {
                        row.getUTF8String(0), start, end})), LiveEntryStore.FAMILY) : null;
                    return joined.apply(row, value == null ? missing : value);
                }
            };
        }
    }
}
