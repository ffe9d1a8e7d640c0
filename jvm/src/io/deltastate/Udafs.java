package io.deltastate;

import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.expressions.UserDefinedFunction;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.types.DataTypes;

/** Entry point called from Python (py4j): registers deltastate's functions under SQL names. */
public final class Udafs {
    private Udafs() {}

    /** combines: one per slot, comma-separated ("add", "min", "max", "latest"; deltastate/stores/ops.py). */
    public static void registerFold(SparkSession spark, String name, String combines, String types) {
        spark.udf().register(name, new ResettableFold(combines.split(","), types.split(",")));
    }

    /** Registers StreamTime; non-deterministic, so the optimizer neither reorders nor repeats it. */
    public static void registerStreamTime(SparkSession spark, String name) {
        UserDefinedFunction udf = functions.udf(new StreamTime(), DataTypes.LongType).asNondeterministic();
        spark.udf().register(name, udf);
    }
}
