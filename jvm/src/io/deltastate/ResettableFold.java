package io.deltastate;

import java.util.ArrayList;
import java.util.List;

import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.expressions.MutableAggregationBuffer;
import org.apache.spark.sql.expressions.UserDefinedAggregateFunction;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/**
 * A key's state as an ordered fold that restarts at every tombstone, expressed as mergeable partials
 * so that Spark's native streaming aggregation (and its RocksDB state store) can keep it.
 *
 * Input columns: pos (long, the record's source offset; one key lives in one partition, so offsets
 * order a key's records; null for a record the fold must ignore, such as a dead letter), reset
 * (boolean, true for a tombstone), then one value column per slot.
 * A partial covers a contiguous range of positions [firstPos, lastPos]. Merging two partials keeps
 * the later one alone when it holds a tombstone, and combines both otherwise, so the result does not
 * depend on which partial Spark hands over first.
 *
 * Each slot is given how two partial values combine, earlier then later: "add", "min", "max" or
 * "latest" (the later value when it has one). Which combine an aggregation op uses, and what an event
 * contributes (count's 1), is declared once in deltastate/stores/ops.py; this class knows no op names.
 * A null value is absent: it leaves the other side as it is. A restored state enters as one record
 * at a position before every offset (-1) whose count slot carries the state's count.
 * The result struct: reset_pos (-1 when the key never saw a tombstone), last_pos, n (records since
 * the last tombstone), then one field per slot, null when n = 0.
 */
public final class ResettableFold extends UserDefinedAggregateFunction {
    private static final long serialVersionUID = 1L;

    private final String[] combines;
    private final DataType[] types;

    public ResettableFold(String[] combines, String[] typeNames) {
        if (combines.length != typeNames.length) {
            throw new IllegalArgumentException("combines and types differ in length");
        }
        this.combines = combines.clone();
        this.types = new DataType[typeNames.length];
        for (int i = 0; i < combines.length; i++) {
            switch (combines[i]) {
                case "add": case "min": case "max": case "latest": break;
                default: throw new IllegalArgumentException("unknown fold combine " + combines[i]);
            }
            switch (typeNames[i]) {
                case "long": types[i] = DataTypes.LongType; break;
                case "double": types[i] = DataTypes.DoubleType; break;
                case "string": types[i] = DataTypes.StringType; break;
                default: throw new IllegalArgumentException("unsupported fold type " + typeNames[i]);
            }
        }
    }

    private static final int FIRST = 0, LAST = 1, RESET = 2, N = 3, SLOTS = 4;

    @Override
    public StructType inputSchema() {
        List<StructField> fields = new ArrayList<>();
        fields.add(DataTypes.createStructField("pos", DataTypes.LongType, true));
        fields.add(DataTypes.createStructField("reset", DataTypes.BooleanType, false));
        for (int i = 0; i < combines.length; i++) {
            fields.add(DataTypes.createStructField("v" + i, types[i], true));
        }
        return DataTypes.createStructType(fields);
    }

    @Override
    public StructType bufferSchema() {
        List<StructField> fields = new ArrayList<>();
        fields.add(DataTypes.createStructField("first_pos", DataTypes.LongType, true));
        fields.add(DataTypes.createStructField("last_pos", DataTypes.LongType, true));
        fields.add(DataTypes.createStructField("reset_pos", DataTypes.LongType, false));
        fields.add(DataTypes.createStructField("n", DataTypes.LongType, false));
        for (int i = 0; i < combines.length; i++) {
            fields.add(DataTypes.createStructField("s" + i, types[i], true));
        }
        return DataTypes.createStructType(fields);
    }

    @Override
    public DataType dataType() {
        List<StructField> fields = new ArrayList<>();
        fields.add(DataTypes.createStructField("reset_pos", DataTypes.LongType, false));
        fields.add(DataTypes.createStructField("last_pos", DataTypes.LongType, true));
        fields.add(DataTypes.createStructField("n", DataTypes.LongType, false));
        for (int i = 0; i < combines.length; i++) {
            fields.add(DataTypes.createStructField("r" + i, types[i], true));
        }
        return DataTypes.createStructType(fields);
    }

    @Override
    public boolean deterministic() {
        return true;
    }

    @Override
    public void initialize(MutableAggregationBuffer buffer) {
        buffer.update(FIRST, null);
        buffer.update(LAST, null);
        buffer.update(RESET, -1L);
        buffer.update(N, 0L);
        for (int i = 0; i < combines.length; i++) {
            buffer.update(SLOTS + i, null);
        }
    }

    @Override
    public void update(MutableAggregationBuffer buffer, Row input) {
        if (input.isNullAt(0)) {
            return;
        }
        long pos = input.getLong(0);
        boolean reset = input.getBoolean(1);
        Object[] partial = new Object[SLOTS + combines.length];
        partial[FIRST] = pos;
        partial[LAST] = pos;
        partial[RESET] = reset ? pos : -1L;
        partial[N] = reset ? 0L : 1L;
        for (int i = 0; i < combines.length; i++) {
            partial[SLOTS + i] = reset ? null : input.get(2 + i);
        }
        merge(buffer, RowFactory.create(partial));
    }

    @Override
    public void merge(MutableAggregationBuffer buffer, Row other) {
        if (other.isNullAt(FIRST)) {
            return;
        }
        if (buffer.isNullAt(FIRST)) {
            copy(buffer, other);
            return;
        }
        boolean otherIsLater = other.getLong(FIRST) > buffer.getLong(LAST);
        Row early = otherIsLater ? snapshot(buffer) : other;
        Row late = otherIsLater ? other : snapshot(buffer);
        if (late.getLong(RESET) >= 0) {
            copy(buffer, late);
            buffer.update(FIRST, early.getLong(FIRST));
            return;
        }
        buffer.update(FIRST, early.getLong(FIRST));
        buffer.update(LAST, late.getLong(LAST));
        buffer.update(RESET, early.getLong(RESET));
        buffer.update(N, early.getLong(N) + late.getLong(N));
        for (int i = 0; i < combines.length; i++) {
            buffer.update(SLOTS + i, combine(i, early.get(SLOTS + i), late.get(SLOTS + i)));
        }
    }

    @Override
    public Object evaluate(Row buffer) {
        Object[] out = new Object[3 + combines.length];
        out[0] = buffer.getLong(RESET);
        out[1] = buffer.isNullAt(LAST) ? null : buffer.getLong(LAST);
        out[2] = buffer.getLong(N);
        for (int i = 0; i < combines.length; i++) {
            out[3 + i] = buffer.get(SLOTS + i);
        }
        return RowFactory.create(out);
    }

    /** Combines an earlier slot value with a later one; nulls are absent values. */
    private Object combine(int i, Object early, Object late) {
        if (combines[i].equals("latest")) {
            return late != null ? late : early;
        }
        if (early == null) {
            return late;
        }
        if (late == null) {
            return early;
        }
        switch (combines[i]) {
            case "add":
                return types[i] == DataTypes.LongType
                        ? (Object) ((Long) early + (Long) late)
                        : (Object) ((Double) early + (Double) late);
            case "min":
                return compare(early, late) <= 0 ? early : late;
            case "max":
                return compare(early, late) >= 0 ? early : late;
            default:
                throw new IllegalStateException(combines[i]);
        }
    }

    @SuppressWarnings("unchecked")
    private static int compare(Object a, Object b) {
        return ((Comparable<Object>) a).compareTo(b);
    }

    private Row snapshot(MutableAggregationBuffer buffer) {
        Object[] values = new Object[SLOTS + combines.length];
        for (int i = 0; i < values.length; i++) {
            values[i] = buffer.get(i);
        }
        return RowFactory.create(values);
    }

    private void copy(MutableAggregationBuffer buffer, Row from) {
        for (int i = 0; i < SLOTS + combines.length; i++) {
            buffer.update(i, from.get(i));
        }
    }
}
