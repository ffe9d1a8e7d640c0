package io.deltastate;

import java.io.Serializable;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.function.BiConsumer;

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
import org.apache.spark.sql.execution.streaming.state.StateStoreIterator;
import org.apache.spark.sql.execution.streaming.state.StateStoreThreadLocalTracker;
import org.apache.spark.sql.execution.streaming.state.UnsafeRowPair;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;
import org.apache.spark.util.TaskCompletionListener;
import scala.Option;
import scala.collection.Iterator;
import scala.jdk.javaapi.CollectionConverters;
import scala.collection.immutable.Seq;
import scala.runtime.AbstractFunction2;

/**
 * A left join of rows keyed like the live entries (key, window_start, window_end first) with the
 * entries they name, by one point lookup each, inside the task that holds the rows: no shuffle of
 * the state, no join. Rows partitioned by key into the state's partitions stay where they are, and
 * the join's output says so, so a merge over it and LiveEntryStore.writeThrough run in the same
 * task: Spark upgrades the task's read store to its write store (as its own streaming aggregation
 * does between restoring and saving state), and the batch's state work is one stage.
 *
 * withEntries does the same for a session store, whose merge needs every live session of a key:
 * the rows keep their partition and gain their keys' entries from a prefix scan each; a merge over
 * them that leaves each key's rows where it found them (SessionMerge) declares so, and writeThrough
 * runs in the same tasks.
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
        org.apache.spark.sql.classic.Dataset<Row> part = byKey(rows, partitions);
        SparkSession spark = part.sparkSession();
        StructType out = part.schema();
        for (StructField f : values.fields()) {
            out = out.add(prefix + f.name(), f.dataType(), true);
        }
        RDD<InternalRow> joined = LiveEntryStore.withReadStateStore(
            part.queryExecution().toRdd(), spark, LiveEntryStore.stateInfo(dir, runId, version, partitions), values,
            new Join(values.length(), retainedColumn, horizon));
        return declared(spark, joined, out, 0, partitions);
    }

    /**
     * join for a window store's batch with tombstones. Each row's boolean column `deletedColumn` says
     * whether a tombstone in the batch deleted its key: such a row is a window the key's events
     * after the tombstone re-create, joined with no entry (its old values null), or, with null
     * bounds, the key's marker (the source position of its last tombstone). A marker is not handed
     * on; once every row is, each marked key's entries retained past horizon that no row re-created
     * follow, each as its marker with the entry's bounds and column `removed` true (false on every
     * other row). The output is declared partitioned by key, as join's is.
     */
    public static Dataset<Row> joinDeleting(Dataset<Row> rows, StructType values, String prefix, String removed,
                                            int deletedColumn, String dir, String runId, long version,
                                            int partitions, int retainedColumn, long horizon) {
        org.apache.spark.sql.classic.Dataset<Row> part = byKey(rows, partitions);
        SparkSession spark = part.sparkSession();
        StructType out = part.schema();
        DataType[] types = typesOf(out);
        for (StructField f : values.fields()) {
            out = out.add(prefix + f.name(), f.dataType(), true);
        }
        out = out.add(removed, DataTypes.BooleanType, false);
        RDD<InternalRow> joined = LiveEntryStore.withReadStateStore(
            part.queryExecution().toRdd(), spark, LiveEntryStore.stateInfo(dir, runId, version, partitions), values,
            new DeletingJoin(values.length(), types, deletedColumn, retainedColumn, horizon));
        return declared(spark, joined, out, 0, partitions);
    }

    /**
     * rows (key first, then window_start, window_end, the entries' `values` columns, the kind
     * column at kindColumn, then any) shuffled by key into the state's partitions, and in each
     * partition, before the first row of each key, every entry of that key at version retained past
     * horizon (retainedColumn as join takes it): kind stateKind, the key, bounds and values set,
     * every other column null. The rows' own entry columns should be null. A task whose store no
     * write upgraded releases it when it ends.
     */
    public static Dataset<Row> withEntries(Dataset<Row> rows, StructType values, String dir, String runId,
                                           long version, int partitions, int kindColumn, int stateKind,
                                           int retainedColumn, long horizon) {
        org.apache.spark.sql.classic.Dataset<Row> part = byKey(rows, partitions);
        SparkSession spark = part.sparkSession();
        DataType[] types = typesOf(values);
        RDD<InternalRow> withState = LiveEntryStore.withReadStateStore(
            part.queryExecution().toRdd(), spark, LiveEntryStore.stateInfo(dir, runId, version, partitions), values,
            new Entries(part.schema().length(), types, kindColumn, stateKind, retainedColumn, horizon));
        return spark.internalCreateDataFrame(withState, part.schema(), false);
    }

    /**
     * rows partitioned by their first column (the key) into the state's partitions. Spark plans no
     * shuffle for this when rows already are partitioned so (EnsureRequirements drops a repartition
     * its input satisfies).
     */
    private static org.apache.spark.sql.classic.Dataset<Row> byKey(Dataset<Row> rows, int partitions) {
        return (org.apache.spark.sql.classic.Dataset<Row>) rows.repartition(partitions, rows.col(rows.columns()[0]));
    }

    private static DataType[] typesOf(StructType schema) {
        DataType[] types = new DataType[schema.length()];
        for (int i = 0; i < types.length; i++) {
            types[i] = schema.fields()[i].dataType();
        }
        return types;
    }

    /** A Dataset over rdd (of schema) that Spark knows is hash-partitioned by column `key`. */
    static Dataset<Row> declared(SparkSession spark, RDD<InternalRow> rdd, StructType schema, int key,
                                         int partitions) {
        List<Attribute> attributes = new ArrayList<>(CollectionConverters.asJava(DataTypeUtils.toAttributes(schema)));
        LogicalRDD plan = new LogicalRDD(CollectionConverters.asScala(attributes).toList(), rdd,
            new HashPartitioning(seq(attributes.get(key)), partitions),
            scala.collection.immutable.List$.MODULE$.<SortOrder>empty(), false, Option.empty(), spark,
            Option.empty(), Option.empty());
        return org.apache.spark.sql.classic.Dataset$.MODULE$.ofRows(spark, plan);
    }

    private static Seq<Expression> seq(Expression expression) {
        List<Expression> one = new ArrayList<>();
        one.add(expression);
        return CollectionConverters.asScala(one).toList();
    }

    /** Releases a task's read store when the task ends, unless a write upgraded it (the write's to commit). */
    private static void releaseUnlessWritten(ReadStateStore store) {
        TaskContext.get().addTaskCompletionListener(new TaskCompletionListener() {
            @Override
            public void onTaskCompletion(TaskContext context) {
                if (!UPGRADED.get().remove(store)) {
                    store.release();
                }
            }
        });
    }

    /** Called by a write with its store: marks the task's read store as upgraded to it. */
    static void written(StateStore store) {
        Option<ReadStateStore> read = StateStoreThreadLocalTracker.getStore();
        if (read.isDefined() && read.get() == store) {
            UPGRADED.get().add(read.get());
        }
    }

    /** A task's lookups in its partition's store, and the retention they apply. */
    private abstract static class PartitionLookup
            extends AbstractFunction2<ReadStateStore, Iterator<InternalRow>, Iterator<InternalRow>> implements Serializable {
        private final int retainedColumn;
        private final long horizon;

        PartitionLookup(int retainedColumn, long horizon) {
            this.retainedColumn = retainedColumn;
            this.horizon = horizon;
        }

        /** Whether the entry with these bounds is retained: its retained column above the horizon. */
        final boolean retained(long start, long end) {
            return retainedColumn == 0 || (retainedColumn == 1 ? start : end) > horizon;
        }

        /** The values of the retained entry row's key and bounds (its first three columns) name, or null. */
        final UnsafeRow lookup(ReadStateStore store, UnsafeProjection keyOf, InternalRow row) {
            long start = row.getLong(1);
            long end = row.getLong(2);
            return retained(start, end) ? store.get(keyOf.apply(new GenericInternalRow(new Object[] {
                row.getUTF8String(0), start, end})), LiveEntryStore.FAMILY) : null;
        }

        /** Each retained entry of key (a prefix scan), its key row and value row handed to `each`. */
        final void forEachEntry(ReadStateStore store, UnsafeProjection prefixOf, UTF8String key,
                                BiConsumer<UnsafeRow, UnsafeRow> each) {
            StateStoreIterator<UnsafeRowPair> entries =
                store.prefixScan(prefixOf.apply(new GenericInternalRow(new Object[] {key})), LiveEntryStore.FAMILY);
            try {
                while (entries.hasNext()) {
                    UnsafeRowPair pair = entries.next();
                    if (retained(pair.key().getLong(1), pair.key().getLong(2))) {
                        each.accept(pair.key(), pair.value());
                    }
                }
            } finally {
                entries.close();
            }
        }
    }

    /** One partition's rows, each joined with its entry's values as it is handed on. */
    private static final class Join extends PartitionLookup {
        private final int valueCount;

        Join(int valueCount, int retainedColumn, long horizon) {
            super(retainedColumn, horizon);
            this.valueCount = valueCount;
        }

        @Override
        public Iterator<InternalRow> apply(ReadStateStore store, Iterator<InternalRow> rows) {
            releaseUnlessWritten(store);
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
                    UnsafeRow value = lookup(store, keyOf, row);
                    return joined.apply(row, value == null ? missing : value);
                }
            };
        }
    }

    /** One partition's rows joined as Join does, a deleted key's rows without a lookup and its
     * entries that no row re-created handed on last, as removals. */
    private static final class DeletingJoin extends PartitionLookup {
        private final int valueCount;
        private final DataType[] types;
        private final int deletedColumn;

        DeletingJoin(int valueCount, DataType[] types, int deletedColumn, int retainedColumn, long horizon) {
            super(retainedColumn, horizon);
            this.valueCount = valueCount;
            this.types = types;
            this.deletedColumn = deletedColumn;
        }

        @Override
        public Iterator<InternalRow> apply(ReadStateStore store, Iterator<InternalRow> rows) {
            releaseUnlessWritten(store);
            UnsafeProjection keyOf = UnsafeProjection.create(LiveEntryStore.KEY_SCHEMA);
            UnsafeProjection prefixOf = UnsafeProjection.create(LiveEntryStore.PREFIX_SCHEMA);
            GenericInternalRow missing = new GenericInternalRow(valueCount);
            GenericInternalRow kept = new GenericInternalRow(new Object[] {false});
            JoinedRow withValues = new JoinedRow();
            JoinedRow joined = new JoinedRow();
            Map<UTF8String, InternalRow> markers = new HashMap<>();  // a deleted key -> its marker
            Map<UTF8String, Set<List<Long>>> recreated = new HashMap<>();  // a deleted key -> bounds of its rows
            ArrayDeque<InternalRow> removals = new ArrayDeque<>();
            return new scala.collection.AbstractIterator<InternalRow>() {
                private InternalRow ahead;
                private boolean drained;

                @Override
                public boolean hasNext() {
                    if (ahead == null) {
                        ahead = advance();
                    }
                    return ahead != null;
                }

                @Override
                public InternalRow next() {
                    if (!hasNext()) {
                        throw new java.util.NoSuchElementException();
                    }
                    InternalRow row = ahead;
                    ahead = null;
                    return row;
                }

                private InternalRow advance() {
                    while (rows.hasNext()) {
                        InternalRow row = rows.next();
                        if (!row.getBoolean(deletedColumn)) {
                            UnsafeRow value = lookup(store, keyOf, row);
                            return joined.apply(withValues.apply(row, value == null ? missing : value), kept);
                        }
                        UTF8String key = row.getUTF8String(0).clone();
                        if (row.isNullAt(1)) {
                            markers.put(key, row.copy());
                            continue;
                        }
                        recreated.computeIfAbsent(key, k -> new HashSet<>()).add(List.of(row.getLong(1), row.getLong(2)));
                        return joined.apply(withValues.apply(row, missing), kept);
                    }
                    if (!drained) {
                        drained = true;
                        for (Map.Entry<UTF8String, InternalRow> marker : markers.entrySet()) {
                            scan(marker.getKey(), marker.getValue());
                        }
                    }
                    return removals.poll();
                }

                private void scan(UTF8String key, InternalRow marker) {
                    Set<List<Long>> rewritten = recreated.getOrDefault(key, Collections.emptySet());
                    forEachEntry(store, prefixOf, key, (k, v) -> {
                        long start = k.getLong(1);
                        long end = k.getLong(2);
                        if (rewritten.contains(List.of(start, end))) {
                            return;
                        }
                        Object[] removal = new Object[types.length + valueCount + 1];
                        for (int i = 0; i < types.length; i++) {
                            removal[i] = marker.isNullAt(i) ? null : marker.get(i, types[i]);
                        }
                        removal[1] = start;
                        removal[2] = end;
                        removal[removal.length - 1] = true;
                        removals.add(new GenericInternalRow(removal));
                    });
                }
            };
        }
    }

    /** One partition's rows, each key's live entries handed on before its first row. */
    private static final class Entries extends PartitionLookup {
        private final int width;
        private final DataType[] types;
        private final int kindColumn;
        private final int stateKind;

        Entries(int width, DataType[] types, int kindColumn, int stateKind, int retainedColumn, long horizon) {
            super(retainedColumn, horizon);
            this.width = width;
            this.types = types;
            this.kindColumn = kindColumn;
            this.stateKind = stateKind;
        }

        @Override
        public Iterator<InternalRow> apply(ReadStateStore store, Iterator<InternalRow> rows) {
            releaseUnlessWritten(store);
            UnsafeProjection prefixOf = UnsafeProjection.create(LiveEntryStore.PREFIX_SCHEMA);
            Set<UTF8String> seen = new HashSet<>();
            ArrayDeque<InternalRow> pending = new ArrayDeque<>();
            return new scala.collection.AbstractIterator<InternalRow>() {
                @Override
                public boolean hasNext() {
                    return !pending.isEmpty() || rows.hasNext();
                }

                @Override
                public InternalRow next() {
                    if (!pending.isEmpty()) {
                        return pending.poll();
                    }
                    InternalRow row = rows.next();
                    UTF8String key = row.getUTF8String(0);
                    if (seen.contains(key)) {
                        return row;
                    }
                    UTF8String owned = key.clone();
                    seen.add(owned);
                    scan(owned, pending);
                    if (pending.isEmpty()) {
                        return row;
                    }
                    pending.add(row.copy());  // the input may reuse its row while the entries go first
                    return pending.poll();
                }

                private void scan(UTF8String key, ArrayDeque<InternalRow> out) {
                    forEachEntry(store, prefixOf, key, (k, value) -> {
                        UnsafeRow v = value.copy();
                        Object[] entry = new Object[width];
                        entry[0] = key;
                        entry[1] = k.getLong(1);
                        entry[2] = k.getLong(2);
                        for (int i = 0; i < types.length; i++) {
                            entry[3 + i] = v.isNullAt(i) ? null : v.get(i, types[i]);
                        }
                        entry[kindColumn] = stateKind;
                        out.add(new GenericInternalRow(entry));
                    });
                }
            };
        }
    }
}
