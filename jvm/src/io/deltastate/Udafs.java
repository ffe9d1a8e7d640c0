package io.deltastate;

import org.apache.spark.sql.Column;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.expressions.UserDefinedFunction;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.types.DataTypes;

/** Entry point called from Python (py4j): registers deltastate's functions under SQL names. */
public final class Udafs {
    private Udafs() {}

    /**
     * Registers the resettable fold as a SQL function of the session (a Catalyst aggregate, so no
     * UDF wrapper sits between it and the generated code). combines: one per slot, comma-separated
     * ("add", "min", "max", "latest"; deltastate/stores/ops.py); types: "long", "double" or "string".
     */
    public static void registerFold(SparkSession spark, String name, String combines, String types) {
        ((org.apache.spark.sql.classic.SparkSession) spark).sessionState().functionRegistry()
                .createOrReplaceTempFunction(name,
                        args -> new ResettableFold(args, combines, types), "java_udf");
    }

    /**
     * Registers JsonFields for one event schema: name(value) reads those fields from a record's bytes.
     * names and types: one per field, types "long", "double", "string" or "boolean".
     */
    public static void registerJsonFields(SparkSession spark, String name, java.util.List<String> names,
                                          java.util.List<String> types) {
        String[] fieldNames = names.toArray(new String[0]);
        String[] fieldTypes = types.toArray(new String[0]);
        ((org.apache.spark.sql.classic.SparkSession) spark).sessionState().functionRegistry()
                .createOrReplaceTempFunction(name, args -> {
                    if (args.size() != 1) {
                        throw new IllegalArgumentException(name + " takes one argument, the record's value bytes");
                    }
                    return new JsonFields(fieldNames, fieldTypes).of(args.head());
                }, "java_udf");
    }

    /** Registers BatchValue: name(long literal) is that value, read by the generated code by reference. */
    public static void registerBatchValue(SparkSession spark, String name) {
        ((org.apache.spark.sql.classic.SparkSession) spark).sessionState().functionRegistry()
                .createOrReplaceTempFunction(name, args -> {
                    if (args.size() != 1) {
                        throw new IllegalArgumentException(name + " takes one argument, a long literal");
                    }
                    return BatchValue.of(args.head());
                }, "java_udf");
    }

    /**
     * rows with one micro-batch's own values as columns: its id, segment and write time, each a
     * BatchValue (registered as `function`) read by reference, so the generated code of every batch
     * is the same. One call where PySpark takes a round trip per column and per literal.
     */
    public static Dataset<Row> withBatchValues(Dataset<Row> rows, String function, String batchColumn,
                                               String segmentColumn, String writeTimeColumn, long batchId,
                                               long segment, long writeTimeMicros) {
        registerBatchValue(rows.sparkSession(), function);
        java.util.Map<String, Column> values = new java.util.LinkedHashMap<>();
        values.put(batchColumn, functions.call_function(function, functions.lit(batchId)));
        values.put(segmentColumn, functions.call_function(function, functions.lit(segment)));
        values.put(writeTimeColumn, functions.call_function(function, functions.lit(writeTimeMicros)));
        return rows.withColumns(values);
    }

    /** Registers StreamTime; non-deterministic, so the optimizer neither reorders nor repeats it. */
    public static void registerStreamTime(SparkSession spark, String name) {
        UserDefinedFunction udf = functions.udf(new StreamTime(), DataTypes.LongType).asNondeterministic();
        spark.udf().register(name, udf);
    }
}
