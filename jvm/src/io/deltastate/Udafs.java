package io.deltastate;

import org.apache.spark.sql.SparkSession;

/** Entry point called from Python (py4j): registers a configured fold under a SQL function name. */
public final class Udafs {
    private Udafs() {}

    public static void registerFold(SparkSession spark, String name, String ops, String types) {
        spark.udf().register(name, new ResettableFold(ops.split(","), types.split(",")));
    }
}
