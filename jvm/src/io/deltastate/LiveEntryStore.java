package io.deltastate;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Set;
import java.util.UUID;

import org.apache.spark.api.java.JavaRDD;
import org.apache.spark.rdd.RDD;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.expressions.UnsafeProjection;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.classic.SparkSession;
import org.apache.spark.sql.execution.streaming.operators.stateful.StatefulOperatorStateInfo;
import org.apache.spark.sql.execution.streaming.state.KeyStateEncoderSpec;
import org.apache.spark.sql.execution.streaming.state.PrefixKeyScanStateEncoderSpec;
import org.apache.spark.sql.execution.streaming.state.ReadStateStore;
import org.apache.spark.sql.execution.streaming.state.StateStore;
import org.apache.spark.sql.execution.streaming.state.StateStoreIterator;
import org.apache.spark.sql.execution.streaming.state.UnsafeRowPair;
import org.apache.spark.sql.internal.SessionState;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;
import scala.Option;
import scala.collection.Iterator;
import scala.jdk.javaapi.CollectionConverters;
import scala.reflect.ClassTag;
import scala.reflect.ClassTag$;
import scala.runtime.AbstractFunction2;

/**
 * The live entries of a window or session store in Spark's state store (the provider the session
 * configures: RocksDB), outside a streaming operator: a micro-batch reads the entries of the keys it
 * touches at version = its batch id and writes its puts and deletes at the same version, which
 * commits version batch id + 1. A replayed batch loads the same version again, so it reads and
 * writes exactly what its first attempt did. Entries are keyed by (key, window_start, window_end)
 * with the store key as a scan prefix; rows are partitioned by store key into a fixed number of
 * state partitions, the same every batch.
 *
 * A read asks for exact entries (a window a batch's events fall into: one point lookup each) or for
 * every entry of a key (bounds null: a prefix scan, for sessions and for keys a batch deletes), so
 * a window store's read costs what its batch touches, not what retention keeps.
 */
public final class LiveEntryStore {
    private LiveEntryStore() {}

    static final String FAMILY = "default";
    static final StructType KEY_SCHEMA = new StructType(new StructField[] {
        DataTypes.createStructField("key", DataTypes.StringType, false),
        DataTypes.createStructField("window_start", DataTypes.LongType, false),
        DataTypes.createStructField("window_end", DataTypes.LongType, false)});
    static final StructType PREFIX_SCHEMA = new StructType(new StructField[] {KEY_SCHEMA.fields()[0]});
    static final ClassTag<InternalRow> ROW = ClassTag$.MODULE$.apply(InternalRow.class);

    static StatefulOperatorStateInfo stateInfo(String dir, String runId, long version, int partitions) {
        return new StatefulOperatorStateInfo(dir, UUID.fromString(runId), 0L, version, partitions, Option.empty(),
                                             Option.empty());
    }

    private static StructType valueSchema(StructType rows, int from) {
        StructField[] fields = rows.fields();
        List<StructField> out = new ArrayList<>();
        for (int i = from; i < fields.length; i++) {
            out.add(fields[i]);
        }
        return new StructType(out.toArray(new StructField[0]));
    }

    /**
     * Applies changes (columns key, window_start, window_end, is_delete, then the value columns) at
     * version; returns the number of rows applied. With sweepColumn 1 (window_start) or 2
     * (window_end), every entry whose column is at or below horizon is removed too, in every
     * partition: entries retention no longer holds, which no later batch reads (0: no sweep).
     */
    public static long write(Dataset<Row> changes, String dir, String runId, long version, int partitions,
                             int sweepColumn, long horizon) {
        org.apache.spark.sql.classic.Dataset<Row> part =
            (org.apache.spark.sql.classic.Dataset<Row>) changes.repartition(partitions, changes.col("key"));
        StructType values = valueSchema(part.schema(), 4);
        RDD<InternalRow> rdd = part.queryExecution().toRdd();
        SparkSession spark = part.sparkSession();
        RDD<InternalRow> counts = withStateStore(rdd, spark, stateInfo(dir, runId, version, partitions), values,
                                                 new Apply(values, sweepColumn, horizon));
        long applied = 0;
        for (InternalRow count : JavaRDD.fromRDD(counts, ROW).collect()) {  // one row per partition
            applied += count.getLong(0);
        }
        return applied;
    }

    /**
     * changes (columns key, window_start, window_end, is_delete, then valueCount value columns, as
     * write takes them under any names, then the columns to return) with their application at version folded into their computation: each task
     * applies its partition's changes as it hands them on, sweeps as write does, and commits once
     * its partition is done. Returns the columns after the value columns, partitioned by key (changes already partitioned by their
     * first column into the state's partitions are not shuffled again); the
     * job that consumes them (the batch's changelog write) is the one that writes the state, so a
     * batch's changes are computed once for both, in one job. A job that fails before its commit
     * leaves version + 1 partly or wholly written; a replay writes it again from version.
     */
    public static Dataset<Row> writeThrough(Dataset<Row> changes, int valueCount, String dir, String runId,
                                            long version, int partitions, int sweepColumn, long horizon) {
        // Rows already partitioned by key into the state's partitions (a merge over LiveLookup.join)
        // are not shuffled again (Spark drops a repartition its input satisfies): they are written in
        // the task that computed them, and the lookup's store is the one written.
        org.apache.spark.sql.classic.Dataset<Row> part =
            (org.apache.spark.sql.classic.Dataset<Row>) changes.repartition(partitions, changes.col(changes.columns()[0]));
        StructType schema = part.schema();
        StructType values = new StructType(java.util.Arrays.copyOfRange(schema.fields(), 4, 4 + valueCount));
        SparkSession spark = part.sparkSession();
        RDD<InternalRow> applied = withStateStore(part.queryExecution().toRdd(), spark,
                                                  stateInfo(dir, runId, version, partitions), values,
                                                  new ApplyThrough(values, sweepColumn, horizon));
        org.apache.spark.sql.Column[] rest = new org.apache.spark.sql.Column[schema.length() - 4 - valueCount];
        for (int i = 0; i < rest.length; i++) {
            rest[i] = org.apache.spark.sql.functions.col(schema.fields()[4 + valueCount + i].name());
        }
        return spark.internalCreateDataFrame(applied, schema, false).select(rest);
    }

    /**
     * The live entries (key, window_start, window_end, value columns) at version that `asked` names:
     * rows (key, window_start, window_end), each the one entry with those bounds, or, with null
     * bounds, every entry of the key. An entry asked for more than once is returned once.
     */
    public static Dataset<Row> read(Dataset<Row> asked, StructType values, String dir, String runId, long version,
                                    int partitions) {
        org.apache.spark.sql.classic.Dataset<Row> part =
            (org.apache.spark.sql.classic.Dataset<Row>) asked.select("key", "window_start", "window_end")
                .repartition(partitions, asked.col("key"));
        RDD<InternalRow> rdd = part.queryExecution().toRdd();
        SparkSession spark = part.sparkSession();
        StructType out = KEY_SCHEMA;
        for (StructField f : values.fields()) {
            out = out.add(f);
        }
        RDD<InternalRow> found = withReadStateStore(rdd, spark, stateInfo(dir, runId, version, partitions), values,
                                                    new Lookup(values));
        return spark.internalCreateDataFrame(found, out, false);
    }

    /** rdd's partitions, each with its state store partition opened for writing. */
    private static RDD<InternalRow> withStateStore(
            RDD<InternalRow> rdd, SparkSession spark, StatefulOperatorStateInfo info, StructType values,
            AbstractFunction2<StateStore, Iterator<InternalRow>, Iterator<InternalRow>> perPartition) {
        return stateStoreOps(rdd, "mapPartitionsWithStateStore",
            new Class<?>[] {org.apache.spark.sql.SQLContext.class, StatefulOperatorStateInfo.class, StructType.class,
                            StructType.class, KeyStateEncoderSpec.class, scala.Function2.class, ClassTag.class},
            spark.sqlContext(), info, KEY_SCHEMA, values, new PrefixKeyScanStateEncoderSpec(KEY_SCHEMA, 1),
            perPartition, ROW);
    }

    /**
     * rdd's partitions, each with its state store partition opened read-only: released, not rolled
     * back, when the task is done, so the version stays loaded for the batch's write that follows (a
     * write store rolled back unloads its version, and the write then loads it again from the
     * checkpoint's snapshot and changelog files).
     */
    static RDD<InternalRow> withReadStateStore(
            RDD<InternalRow> rdd, SparkSession spark, StatefulOperatorStateInfo info, StructType values,
            AbstractFunction2<ReadStateStore, Iterator<InternalRow>, Iterator<InternalRow>> perPartition) {
        return stateStoreOps(rdd, "mapPartitionsWithReadStateStore",
            new Class<?>[] {StatefulOperatorStateInfo.class, StructType.class, StructType.class,
                            KeyStateEncoderSpec.class, SessionState.class, Option.class, boolean.class,
                            scala.collection.immutable.Map.class, scala.Function2.class, ClassTag.class},
            info, KEY_SCHEMA, values, new PrefixKeyScanStateEncoderSpec(KEY_SCHEMA, 1), spark.sessionState(),
            Option.apply(spark.streams().stateStoreCoordinator()), false,
            scala.collection.immutable.Map$.MODULE$.empty(), perPartition, ROW);
    }

    /**
     * Calls one of Spark's StateStoreOps methods on rdd: a Scala implicit class of the state package
     * object, which Java cannot name, hence reflection.
     */
    @SuppressWarnings("unchecked")
    private static RDD<InternalRow> stateStoreOps(RDD<InternalRow> rdd, String method, Class<?>[] types,
                                                  Object... args) {
        try {
            Class<?> ops = Class.forName("org.apache.spark.sql.execution.streaming.state.package$StateStoreOps");
            Object wrapped = ops.getConstructor(RDD.class, ClassTag.class).newInstance(rdd, ROW);
            return (RDD<InternalRow>) ops.getMethod(method, types).invoke(wrapped, args);
        } catch (ReflectiveOperationException e) {
            throw new IllegalStateException("Spark's state store API is not the one deltastate was built for", e);
        }
    }

    /** Puts and removes changes in one partition's store, and sweeps it; rows as write takes them. */
    private static final class Changes {
        private final UnsafeProjection keyOf = UnsafeProjection.create(KEY_SCHEMA);
        private final UnsafeProjection valueOf;
        private final DataType[] types;
        private final StateStore store;

        Changes(StructType values, StateStore store) {
            this.valueOf = UnsafeProjection.create(values);
            this.types = new DataType[values.length()];
            for (int i = 0; i < types.length; i++) {
                types[i] = values.fields()[i].dataType();
            }
            this.store = store;
        }

        void apply(InternalRow row) {
            UnsafeRow key = keyOf.apply(new GenericInternalRow(new Object[] {
                row.getUTF8String(0).clone(), row.getLong(1), row.getLong(2)})).copy();
            if (row.getBoolean(3)) {
                store.remove(key, FAMILY);
            } else {
                Object[] value = new Object[types.length];
                for (int i = 0; i < types.length; i++) {
                    value[i] = row.isNullAt(4 + i) ? null : row.get(4 + i, types[i]);
                }
                store.put(key, valueOf.apply(new GenericInternalRow(value)).copy(), FAMILY);
            }
        }

        /** Sweeps (sweepColumn > 0: the partition's entries at or below horizon), then commits. */
        void commit(int sweepColumn, long horizon) {
            if (sweepColumn > 0) {
                sweep(sweepColumn, horizon);
            }
            store.commit();
        }

        /** Removes the partition's entries at or below the horizon, collected first, then removed. */
        private void sweep(int sweepColumn, long horizon) {
            List<UnsafeRow> expired = new ArrayList<>();
            StateStoreIterator<UnsafeRowPair> entries = store.iterator(FAMILY);
            try {
                while (entries.hasNext()) {
                    UnsafeRow key = entries.next().key();
                    if (key.getLong(sweepColumn) <= horizon) {
                        expired.add(key.copy());
                    }
                }
            } finally {
                entries.close();
            }
            for (UnsafeRow key : expired) {
                store.remove(key, FAMILY);
            }
        }
    }

    /** A task's work on its partition's store: the changes' value schema and the sweep to do. */
    private abstract static class PartitionWrite
            extends AbstractFunction2<StateStore, Iterator<InternalRow>, Iterator<InternalRow>> implements Serializable {
        final StructType values;
        final int sweepColumn;
        final long horizon;

        PartitionWrite(StructType values, int sweepColumn, long horizon) {
            this.values = values;
            this.sweepColumn = sweepColumn;
            this.horizon = horizon;
        }
    }

    /** Applies one partition's changes, then commits; one row out: the number applied. */
    private static final class Apply extends PartitionWrite {
        Apply(StructType values, int sweepColumn, long horizon) {
            super(values, sweepColumn, horizon);
        }

        @Override
        public Iterator<InternalRow> apply(StateStore store, Iterator<InternalRow> rows) {
            Changes changes = new Changes(values, store);
            long applied = 0;
            while (rows.hasNext()) {
                changes.apply(rows.next());
                applied++;
            }
            changes.commit(sweepColumn, horizon);
            List<InternalRow> count = new ArrayList<>();
            count.add(new GenericInternalRow(new Object[] {applied}));
            return CollectionConverters.asScala(count.iterator());
        }
    }

    /** Applies one partition's changes as they are handed on; commits when the last has been. */
    private static final class ApplyThrough extends PartitionWrite {
        ApplyThrough(StructType values, int sweepColumn, long horizon) {
            super(values, sweepColumn, horizon);
        }

        @Override
        public Iterator<InternalRow> apply(StateStore store, Iterator<InternalRow> rows) {
            LiveLookup.written(store);
            Changes changes = new Changes(values, store);
            return new scala.collection.AbstractIterator<InternalRow>() {
                private boolean committed;

                @Override
                public boolean hasNext() {
                    if (rows.hasNext()) {
                        return true;
                    }
                    if (!committed) {
                        changes.commit(sweepColumn, horizon);
                        committed = true;
                    }
                    return false;
                }

                @Override
                public InternalRow next() {
                    InternalRow row = rows.next();
                    changes.apply(row);
                    return row;
                }
            };
        }
    }

    /**
     * The entries asked for: whole keys from a prefix scan, single windows from point lookups
     * (skipped when their key was scanned whole), from the store opened read-only.
     */
    private static final class Lookup
            extends AbstractFunction2<ReadStateStore, Iterator<InternalRow>, Iterator<InternalRow>> implements Serializable {
        private final StructType values;

        Lookup(StructType values) {
            this.values = values;
        }

        @Override
        public Iterator<InternalRow> apply(ReadStateStore store, Iterator<InternalRow> asked) {
            Set<UTF8String> whole = new HashSet<>();
            Set<UnsafeRow> windows = new LinkedHashSet<>();
            UnsafeProjection keyOf = UnsafeProjection.create(KEY_SCHEMA);
            while (asked.hasNext()) {
                InternalRow row = asked.next();
                UTF8String key = row.getUTF8String(0).clone();
                if (row.isNullAt(1) || row.isNullAt(2)) {
                    whole.add(key);
                } else {
                    windows.add(keyOf.apply(new GenericInternalRow(new Object[] {key, row.getLong(1), row.getLong(2)}))
                                .copy());
                }
            }
            List<InternalRow> out = new ArrayList<>();
            UnsafeProjection prefixOf = UnsafeProjection.create(PREFIX_SCHEMA);
            for (UTF8String key : whole) {
                StateStoreIterator<UnsafeRowPair> entries =
                    store.prefixScan(prefixOf.apply(new GenericInternalRow(new Object[] {key})), FAMILY);
                try {
                    while (entries.hasNext()) {
                        UnsafeRowPair pair = entries.next();
                        out.add(entry(pair.key(), pair.value()));
                    }
                } finally {
                    entries.close();
                }
            }
            for (UnsafeRow window : windows) {
                if (whole.contains(window.getUTF8String(0))) {
                    continue;
                }
                UnsafeRow value = store.get(window, FAMILY);
                if (value != null) {
                    out.add(entry(window, value));
                }
            }
            store.release();  // read only: the version stays loaded, unchanged
            return CollectionConverters.asScala(out.iterator());
        }

        private InternalRow entry(UnsafeRow key, UnsafeRow value) {
            int n = values.length();
            Object[] row = new Object[3 + n];
            row[0] = key.getUTF8String(0).clone();
            row[1] = key.getLong(1);
            row[2] = key.getLong(2);
            for (int i = 0; i < n; i++) {
                row[3 + i] = value.isNullAt(i) ? null : value.get(i, values.fields()[i].dataType());
            }
            return new GenericInternalRow(row);
        }
    }
}
