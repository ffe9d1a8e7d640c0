package io.deltastate;

import java.io.IOException;
import java.io.Serializable;
import java.io.UncheckedIOException;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;

import com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.spark.rdd.RDD;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.classic.SparkSession;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;
import org.apache.spark.util.LongAccumulator;
import scala.collection.Iterator;
import scala.jdk.javaapi.CollectionConverters;
import scala.runtime.AbstractFunction1;

/**
 * A session store's merge (Kafka Streams' KStreamSessionWindowAggregate over its session store's
 * findSessions), in one pass over a partition's rows sorted by key, kind, offset: each key's live
 * sessions (kind 0) first, then its records (kind 1, events and tombstones) in offset order.
 *
 * The rules' thresholds arrive on each record, computed by deltastate's rules in Python
 * (changelog/rules.py retention_horizon, engine/windowed/lateness.py session_close_time), so this
 * class only compares:
 *  - an event at ts merges every session of its key with end >= ts - gap and start <= ts + gap whose
 *    end is above the record's retained_above (null: the partition has no stream time yet, every
 *    session is reachable);
 *  - it is late when the merged session's end is below its late_below (nothing changes then);
 *  - a tombstone removes every session of the key;
 *  - sessions the batch supersedes are emitted as deletes, so no two sessions of a key overlap.
 * How values combine (add, min, max, latest, mean) is given per aggregation from
 * deltastate/stores/ops.py; a mean keeps its sum and is divided by the session's events when emitted.
 *
 * Output rows: kind ("put", "delete", or the late kind for a record too late for any session), key,
 * window_start, window_end, one column per aggregation, events, source_partition, source_offset,
 * event_ms. A key's output rows stay in the partition its input rows were in.
 */
public final class SessionMerge implements Serializable {
    private static final long serialVersionUID = 1L;
    private static final int STATE = 0;
    private static final int ADD = 0, MIN = 1, MAX = 2, LATEST = 3, MEAN = 4;

    private final int key, kind, partition, offset, ts, lateBelow, retainedAbove, isDelete;
    private final int start, end, events, sourcePartition, sourceOffset;
    private final int[] stateColumn, sourceColumn;  // per aggregation; sourceColumn -1: the event contributes 1
    private final DataType[] stateType, sourceType, targetType;
    private final int[] combine;
    private final long gap;
    private final UTF8String lateKind;
    private final StructType input, output;

    private SessionMerge(StructType input, String targets, String sources, String combines, String outputDdl, long gap,
                 String lateKind) {
        this.input = input;
        this.key = input.fieldIndex("key");
        this.kind = input.fieldIndex("kind");
        this.partition = input.fieldIndex("partition");
        this.offset = input.fieldIndex("offset");
        this.ts = input.fieldIndex("ts");
        this.lateBelow = input.fieldIndex("late_below");
        this.retainedAbove = input.fieldIndex("retained_above");
        this.isDelete = input.fieldIndex("is_delete");
        this.start = input.fieldIndex("window_start");
        this.end = input.fieldIndex("window_end");
        this.events = input.fieldIndex("events");
        this.sourcePartition = input.fieldIndex("source_partition");
        this.sourceOffset = input.fieldIndex("source_offset");
        this.output = StructType.fromDDL(outputDdl);
        String[] names = targets.split(",", -1), fields = sources.split(",", -1), kinds = combines.split(",", -1);
        if (names.length != fields.length || names.length != kinds.length) {
            throw new IllegalArgumentException("targets, sources and combines differ in length");
        }
        int n = names.length;
        stateColumn = new int[n];
        sourceColumn = new int[n];
        stateType = new DataType[n];
        sourceType = new DataType[n];
        targetType = new DataType[n];
        combine = new int[n];
        for (int i = 0; i < n; i++) {
            stateColumn[i] = input.fieldIndex(names[i]);
            stateType[i] = input.fields()[stateColumn[i]].dataType();
            sourceColumn[i] = fields[i].isEmpty() ? -1 : input.fieldIndex(fields[i]);
            sourceType[i] = sourceColumn[i] < 0 ? DataTypes.LongType : input.fields()[sourceColumn[i]].dataType();
            targetType[i] = output.fields()[output.fieldIndex(names[i])].dataType();
            combine[i] = List.of("add", "min", "max", "latest", "mean").indexOf(kinds[i]);
            if (combine[i] < 0) {
                throw new IllegalArgumentException("unknown combine '" + kinds[i] + "' for " + names[i]);
            }
        }
        this.gap = gap;
        this.lateKind = UTF8String.fromString(lateKind);
    }

    /**
     * The merge of rows of schema input. targets, sources and combines: comma-separated, one per
     * aggregation (a source left empty contributes 1 per event); outputDdl: the output schema.
     */
    public static SessionMerge of(StructType input, String targets, String sources, String combines,
                                  String outputDdl, long gap, String lateKind) {
        return new SessionMerge(input, targets, sources, combines, outputDdl, gap, lateKind);
    }

    /**
     * The merge of each partition of sorted (of this merge's input schema). With lateSeen, the late
     * rows emitted are added to it. keyedPartitions > 0: sorted's partitions are the state's (hash
     * of key into that many), and the output is declared so, so LiveEntryStore.writeThrough over it
     * runs in the same tasks: the merge emits a key's rows in the partition it read them in.
     */
    public Dataset<Row> apply(Dataset<Row> sorted, LongAccumulator lateSeen, int keyedPartitions) {
        org.apache.spark.sql.classic.Dataset<Row> ds = (org.apache.spark.sql.classic.Dataset<Row>) sorted;
        if (!ds.schema().equals(input)) {
            throw new IllegalArgumentException("the rows' schema " + ds.schema().simpleString()
                + " is not the merge's " + input.simpleString());
        }
        RDD<InternalRow> merged = ds.queryExecution().toRdd().mapPartitions(
            new PartitionMerge(this, lateSeen), true, LiveEntryStore.ROW);
        SparkSession spark = ds.sparkSession();
        return keyedPartitions > 0
            ? LiveLookup.declared(spark, merged, output, output.fieldIndex("key"), keyedPartitions)
            : spark.internalCreateDataFrame(merged, output, false);
    }

    /**
     * The merge as a function of JSON rows, for a caller without a Dataset (deltastate's rule tests):
     * rowsJson is an array of rows, each an array of values in the input's column order, sorted as
     * apply needs; the answer is the output rows, each an array of values in the output's order.
     */
    public String mergeJson(String rowsJson) {
        ObjectMapper json = new ObjectMapper();
        try {
            List<InternalRow> rows = new ArrayList<>();
            for (Object row : json.readValue(rowsJson, List.class)) {
                rows.add(internalRow(input, (List<?>) row));
            }
            List<List<Object>> out = new ArrayList<>();
            Iterator<InternalRow> merged = partition(CollectionConverters.asScala(rows.iterator()), null);
            while (merged.hasNext()) {
                out.add(externalRow(output, merged.next()));
            }
            return json.writeValueAsString(out);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /** A JSON row's values (numbers, strings, booleans, nulls) as an InternalRow of schema. */
    private static InternalRow internalRow(StructType schema, List<?> values) {
        Object[] row = new Object[schema.length()];
        for (int i = 0; i < row.length; i++) {
            Object v = values.get(i);
            DataType type = schema.fields()[i].dataType();
            if (v == null) {
                row[i] = null;
            } else if (type.equals(DataTypes.StringType)) {
                row[i] = UTF8String.fromString(v.toString());
            } else if (type.equals(DataTypes.LongType)) {
                row[i] = ((Number) v).longValue();
            } else if (type.equals(DataTypes.IntegerType)) {
                row[i] = ((Number) v).intValue();
            } else if (type.equals(DataTypes.DoubleType)) {
                row[i] = ((Number) v).doubleValue();
            } else {
                row[i] = v;  // booleans
            }
        }
        return new GenericInternalRow(row);
    }

    /** An output row's values as JSON takes them. */
    private static List<Object> externalRow(StructType schema, InternalRow row) {
        List<Object> values = new ArrayList<>();
        for (int i = 0; i < schema.length(); i++) {
            Object v = row.isNullAt(i) ? null : row.get(i, schema.fields()[i].dataType());
            values.add(v instanceof UTF8String ? v.toString() : v);
        }
        return values;
    }

    /** One partition's merge: its rows, grouped by key as they arrive, each key merged as it ends. */
    Iterator<InternalRow> partition(Iterator<InternalRow> rows, LongAccumulator lateSeen) {
        ArrayDeque<InternalRow> pending = new ArrayDeque<>();
        return new scala.collection.AbstractIterator<InternalRow>() {
            private UTF8String current;
            private final List<Session> state = new ArrayList<>();
            private final List<Record> records = new ArrayList<>();

            @Override
            public boolean hasNext() {
                while (pending.isEmpty() && (rows.hasNext() || current != null)) {
                    if (!rows.hasNext()) {
                        flush();
                        break;
                    }
                    InternalRow row = rows.next();
                    UTF8String rowKey = row.getUTF8String(key);
                    if (current != null && !current.equals(rowKey)) {
                        flush();
                    }
                    if (current == null) {
                        current = rowKey.clone();
                    }
                    if (row.getInt(kind) == STATE) {
                        state.add(session(row));
                    } else {
                        records.add(record(row));
                    }
                }
                return !pending.isEmpty();
            }

            @Override
            public InternalRow next() {
                if (!hasNext()) {
                    throw new java.util.NoSuchElementException();
                }
                return pending.poll();
            }

            private void flush() {
                long late = mergeKey(current, state, records, pending);
                if (lateSeen != null && late > 0) {
                    lateSeen.add(late);
                }
                current = null;
                state.clear();
                records.clear();
            }
        };
    }

    /** Applies one key's records to its live sessions, emitting its output rows; returns its late rows. */
    private long mergeKey(UTF8String k, List<Session> state, List<Record> records, ArrayDeque<InternalRow> out) {
        List<Session> sessions = new ArrayList<>(state);
        // Sessions past retention can never merge again (store time only grows along a partition):
        // set aside once the list doubles, so that a key with a long history is not scanned per event.
        List<Session> retired = new ArrayList<>();
        int limit = Math.max(8, 2 * sessions.size());
        long late = 0;
        for (Record r : records) {
            if (r.isDelete) {
                sessions = new ArrayList<>();
                retired = new ArrayList<>();
                continue;
            }
            if (sessions.size() > limit) {
                List<Session> kept = new ArrayList<>();
                for (Session s : sessions) {
                    (r.reaches(s) ? kept : retired).add(s);
                }
                sessions = kept;
                limit = Math.max(8, 2 * sessions.size());
            }
            List<Session> overlapping = new ArrayList<>();
            long mergedEnd = r.ts;
            for (Session s : sessions) {
                if (s.end >= r.ts - gap && s.start <= r.ts + gap && r.reaches(s)) {
                    overlapping.add(s);
                    mergedEnd = Math.max(mergedEnd, s.end);
                }
            }
            if (r.lateBelow != null && mergedEnd < r.lateBelow) {
                out.add(row(lateKind, k, null, null, null, null, r.partition, r.offset, null));
                late++;
                continue;
            }
            Session merged;
            if (overlapping.size() == 1) {
                // The common case: the event joins one session. Updating it in place gives what the
                // general merge does (the event folded last), without a new session per event.
                Session one = overlapping.get(0);
                merged = one.dirty ? one : one.copy();
                if (merged != one) {
                    sessions.set(indexOf(sessions, one), merged);
                }
            } else {
                // The new session holds no offset until a session merges into it, so each one it
                // takes is earlier or later by its own offset, and `latest` keeps the newest's value.
                merged = new Session(r.ts, r.ts, 0, new Object[combine.length], new double[combine.length],
                                     r.partition, -1L, r.ts, true);
                for (Session s : overlapping) {
                    mergeInto(merged, s);
                    sessions.remove(indexOf(sessions, s));
                }
                sessions.add(merged);
            }
            // The event itself is the most recent: folded last, so `latest` takes its value.
            merged.start = Math.min(merged.start, r.ts);
            merged.end = Math.max(merged.end, r.ts);
            merged.events += 1;
            merged.partition = r.partition;
            merged.offset = Math.max(merged.offset, r.offset);
            merged.eventMs = Math.max(merged.eventMs, r.ts);
            for (int i = 0; i < combine.length; i++) {
                if (combine[i] == MEAN) {
                    merged.sums[i] += r.contributions[i] == null ? 0.0 : ((Number) r.contributions[i]).doubleValue();
                } else {
                    merged.values[i] = combined(i, merged.values[i], r.contributions[i]);
                }
            }
        }
        sessions.addAll(retired);
        Set<List<Long>> bounds = new HashSet<>();
        for (Session s : sessions) {
            bounds.add(List.of(s.start, s.end));
            if (s.dirty) {
                out.add(row(UTF8String.fromString("put"), k, s.start, s.end, finished(s), s.events, s.partition,
                            s.offset, s.eventMs));
            }
        }
        Record last = records.isEmpty() ? null : records.get(records.size() - 1);
        for (Session s : state) {
            if (!bounds.contains(List.of(s.start, s.end))) {
                out.add(row(UTF8String.fromString("delete"), k, s.start, s.end, null, null,
                            last == null ? s.partition : last.partition, last == null ? s.offset : last.offset, null));
            }
        }
        return late;
    }

    private static int indexOf(List<Session> sessions, Session s) {
        for (int i = 0; i < sessions.size(); i++) {
            if (sessions.get(i) == s) {
                return i;
            }
        }
        throw new IllegalStateException("a session the merge reached is not among the key's sessions");
    }

    /** `other` folded into `into`; other is the later part when it holds the higher offset. */
    private void mergeInto(Session into, Session other) {
        boolean later = other.offset > into.offset;
        for (int i = 0; i < combine.length; i++) {
            if (combine[i] == MEAN) {
                into.sums[i] += other.sums[i];
            } else {
                into.values[i] = later ? combined(i, into.values[i], other.values[i])
                                       : combined(i, other.values[i], into.values[i]);
            }
        }
        into.start = Math.min(into.start, other.start);
        into.end = Math.max(into.end, other.end);
        into.events += other.events;
        into.partition = Math.max(into.partition, other.partition);
        into.offset = Math.max(into.offset, other.offset);
        into.eventMs = Math.max(into.eventMs, other.eventMs);
    }

    /** Two values of aggregation i, earlier then later; null is absent (stores/ops.py combine). */
    @SuppressWarnings({"unchecked", "rawtypes"})
    private Object combined(int i, Object earlier, Object later) {
        if (combine[i] == LATEST) {
            return later == null ? earlier : later;
        }
        if (earlier == null) {
            return later;
        }
        if (later == null) {
            return earlier;
        }
        if (combine[i] == ADD) {
            if (earlier instanceof Long) {
                return (Long) earlier + (Long) later;
            }
            return ((Number) earlier).doubleValue() + ((Number) later).doubleValue();
        }
        int order = ((Comparable) earlier).compareTo(later);
        return combine[i] == MIN ? (order <= 0 ? earlier : later) : (order >= 0 ? earlier : later);
    }

    private Object[] finished(Session s) {
        Object[] values = new Object[combine.length];
        for (int i = 0; i < combine.length; i++) {
            values[i] = combine[i] != MEAN ? s.values[i] : s.events == 0 ? null : s.sums[i] / s.events;
        }
        return values;
    }

    private InternalRow row(UTF8String rowKind, UTF8String k, Long windowStart, Long windowEnd, Object[] values,
                            Long rowEvents, int rowPartition, long rowOffset, Long eventMs) {
        Object[] row = new Object[output.length()];
        row[0] = rowKind;
        row[1] = k;
        row[2] = windowStart;
        row[3] = windowEnd;
        for (int i = 0; i < combine.length; i++) {
            row[4 + i] = values == null ? null : values[i];
        }
        int n = 4 + combine.length;
        row[n] = rowEvents;
        row[n + 1] = rowPartition;
        row[n + 2] = rowOffset;
        row[n + 3] = eventMs;
        return new GenericInternalRow(row);
    }

    /** A live session from a state row: its values, a mean's sum as its value times its events. */
    private Session session(InternalRow row) {
        long n = row.getLong(events);
        Object[] values = new Object[combine.length];
        double[] sums = new double[combine.length];
        for (int i = 0; i < combine.length; i++) {
            Object v = typed(i, row.isNullAt(stateColumn[i]) ? null : row.get(stateColumn[i], stateType[i]));
            if (combine[i] == MEAN) {
                sums[i] = v == null ? 0.0 : ((Number) v).doubleValue() * n;
            } else {
                values[i] = v;
            }
        }
        long windowEnd = row.getLong(end);
        return new Session(row.getLong(start), windowEnd, n, values, sums, row.getInt(sourcePartition),
                           row.getLong(sourceOffset), windowEnd, false);
    }

    private Record record(InternalRow row) {
        boolean deleting = row.getBoolean(isDelete);
        Object[] contributions = new Object[combine.length];
        if (!deleting) {
            for (int i = 0; i < combine.length; i++) {
                int c = sourceColumn[i];
                contributions[i] = c < 0 ? typed(i, 1L) : typed(i, row.isNullAt(c) ? null : row.get(c, sourceType[i]));
            }
        }
        return new Record(row.getInt(partition), row.getLong(offset), deleting,
                          deleting ? 0L : row.getLong(ts), nullableLong(row, lateBelow),
                          nullableLong(row, retainedAbove), contributions);
    }

    private static Long nullableLong(InternalRow row, int column) {
        return row.isNullAt(column) ? null : row.getLong(column);
    }

    /** A value as aggregation i's output type holds it (a string copied out of the input row). */
    private Object typed(int i, Object v) {
        if (v == null) {
            return null;
        }
        DataType type = targetType[i];
        if (type.equals(DataTypes.LongType)) {
            return ((Number) v).longValue();
        }
        if (type.equals(DataTypes.DoubleType)) {
            return ((Number) v).doubleValue();
        }
        if (type.equals(DataTypes.StringType)) {
            return v instanceof UTF8String ? ((UTF8String) v).clone() : UTF8String.fromString(v.toString());
        }
        throw new IllegalArgumentException("a session aggregation of type " + type.simpleString());
    }

    private static final class Session {
        long start, end, events, offset, eventMs;
        int partition;
        final Object[] values;
        final double[] sums;
        final boolean dirty;  // changed by this batch: emitted as a put

        Session(long start, long end, long events, Object[] values, double[] sums, int partition, long offset,
                long eventMs, boolean dirty) {
            this.start = start;
            this.end = end;
            this.events = events;
            this.values = values;
            this.sums = sums;
            this.partition = partition;
            this.offset = offset;
            this.eventMs = eventMs;
            this.dirty = dirty;
        }

        Session copy() {
            return new Session(start, end, events, values.clone(), sums.clone(), partition, offset, eventMs, true);
        }
    }

    private static final class Record {
        final int partition;
        final long offset, ts;
        final boolean isDelete;
        final Long lateBelow, retainedAbove;
        final Object[] contributions;

        Record(int partition, long offset, boolean isDelete, long ts, Long lateBelow, Long retainedAbove,
               Object[] contributions) {
            this.partition = partition;
            this.offset = offset;
            this.isDelete = isDelete;
            this.ts = ts;
            this.lateBelow = lateBelow;
            this.retainedAbove = retainedAbove;
            this.contributions = contributions;
        }

        /** Whether the store still returns s when this record looks it up. */
        boolean reaches(Session s) {
            return retainedAbove == null || s.end > retainedAbove;
        }
    }

    private static final class PartitionMerge extends AbstractFunction1<Iterator<InternalRow>, Iterator<InternalRow>>
            implements Serializable {
        private final SessionMerge merge;
        private final LongAccumulator lateSeen;

        PartitionMerge(SessionMerge merge, LongAccumulator lateSeen) {
            this.merge = merge;
            this.lateSeen = lateSeen;
        }

        @Override
        public Iterator<InternalRow> apply(Iterator<InternalRow> rows) {
            return merge.partition(rows, lateSeen);
        }
    }
}
