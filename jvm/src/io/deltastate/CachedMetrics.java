package io.deltastate;

import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.execution.CacheManager;
import org.apache.spark.sql.execution.CachedData;
import org.apache.spark.sql.execution.CollectMetricsExec$;
import org.apache.spark.sql.execution.columnar.InMemoryRelation;
import scala.Option;

/**
 * The metrics a cached Dataset observed (Dataset.observe before persist) while a job filled its
 * cache.
 *
 * A job reports an observation through its query's listener event only when the observed plan is
 * part of that query's plan; a job that consumes the cache through an RDD of another query (a
 * state store written through inside a Delta write) does not. The observation's accumulator lives
 * in the cache's own physical plan, which is computed once per partition however many queries read
 * it, so its value is the observation over every cached row once the cache is filled.
 */
public final class CachedMetrics {
    private CachedMetrics() {}

    /**
     * The row observed under name in ds's cache; null unless ds is cached, every partition of the
     * cache is filled, and name is observed there.
     */
    public static Row of(Dataset<Row> ds, String name) {
        InMemoryRelation relation = filled(ds);
        if (relation == null) {
            return null;
        }
        Option<Row> row = CollectMetricsExec$.MODULE$.collect(relation.cachedPlan()).get(name);
        return row.isEmpty() ? null : row.get();
    }

    /** How many rows ds's filled cache holds (each partition counted once); -1 unless it is filled. */
    public static long rows(Dataset<Row> ds) {
        InMemoryRelation relation = filled(ds);
        return relation == null ? -1L : relation.cacheBuilder().materializedRowCount();
    }

    private static InMemoryRelation filled(Dataset<Row> ds) {
        org.apache.spark.sql.classic.Dataset<Row> classic = (org.apache.spark.sql.classic.Dataset<Row>) ds;
        CacheManager cache = classic.sparkSession().sharedState().cacheManager();
        Option<CachedData> data = cache.lookupCachedData(classic);
        if (data.isEmpty() || !data.get().cachedRepresentation().cacheBuilder().isCachedColumnBuffersLoaded()) {
            return null;
        }
        return data.get().cachedRepresentation();
    }
}
