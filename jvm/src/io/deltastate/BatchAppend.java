package io.deltastate;

import java.util.ArrayList;
import java.util.List;

import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SaveMode;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.delta.DeltaLog;
import org.apache.spark.sql.delta.DeltaOperations;
import org.apache.spark.sql.delta.DeltaOptions;
import org.apache.spark.sql.delta.OptimisticTransaction;
import org.apache.spark.sql.delta.actions.Action;
import org.apache.spark.sql.delta.actions.FileAction;
import org.apache.spark.sql.delta.actions.SetTransaction;
import org.apache.spark.sql.delta.VersionChecksum;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import scala.Option;
import scala.jdk.javaapi.CollectionConverters;

/**
 * An append whose data files are written before its commit's metadata is known.
 *
 * Delta's DataFrameWriter takes the commit's userMetadata before it writes, so a batch whose
 * metadata depends on the rows written (a micro-batch's audit: its counts, offsets and stream
 * times) would have to compute them in a job of their own first. Here the files are written by one
 * transaction's writeFiles, the caller reads what it observed during that job, and the same
 * transaction commits the files with the metadata: one Spark job and one commit. An optional
 * txnAppId/txnVersion makes the commit idempotent like the writer's options do. Asking for an app
 * id's txn version reads it from the snapshot's checksum file when that lists the table's
 * transactions (Delta writes them there), where Delta's own lookup rebuilds the table's state.
 */
public final class BatchAppend {
    /** Delta's table property after which an app id's txn entry may expire. */
    private static final String TXN_RETENTION = "delta.setTransactionRetentionDuration";

    private final OptimisticTransaction txn;
    private final scala.collection.immutable.Seq<FileAction> files;

    private BatchAppend(OptimisticTransaction txn, scala.collection.immutable.Seq<FileAction> files) {
        this.txn = txn;
        this.files = files;
    }

    /** Starts a transaction on the table at path; asks nothing of the table's state. */
    public static OptimisticTransaction begin(SparkSession spark, String path) {
        return DeltaLog.forTable(spark, path).startTransaction();
    }

    /**
     * The transaction's txn version for appId (-1 when none), registered as read like Delta's
     * txnVersion: a concurrent commit of the same appId then fails this transaction's commit. The
     * version comes from the snapshot's checksum when it lists the transactions and the table lets
     * no txn entry expire (expiry is applied only by the state's lookup); else from Delta's lookup,
     * which rebuilds the table's state.
     */
    public static long txnVersion(OptimisticTransaction txn, String appId) {
        Option<VersionChecksum> checksum = txn.snapshot().checksumOpt();
        boolean expires = txn.metadata().configuration().contains(TXN_RETENTION);
        if (expires || checksum.isEmpty() || checksum.get().setTransactions().isEmpty()) {
            return txn.txnVersion(appId);
        }
        txn.readTxn().$plus$eq(appId);
        long version = -1L;
        for (SetTransaction t : CollectionConverters.asJava(checksum.get().setTransactions().get())) {
            if (t.appId().equals(appId)) {
                version = Math.max(version, t.version());
            }
        }
        return version;
    }

    /** Whether every column of rows is a column of the transaction's table, of the same type. */
    public static boolean fitsTable(OptimisticTransaction txn, Dataset<Row> rows) {
        StructType table = txn.metadata().schema();
        for (StructField field : rows.schema().fields()) {
            Option<Object> index = table.getFieldIndex(field.name());
            if (index.isEmpty() || !table.fields()[(Integer) index.get()].dataType().equals(field.dataType())) {
                return false;
            }
        }
        return true;
    }

    /** Writes the rows as the transaction's files (one Spark job), at most maxRecordsPerFile a file. */
    public static BatchAppend write(OptimisticTransaction txn, Dataset<Row> rows, long maxRecordsPerFile) {
        scala.collection.immutable.Map<String, String> options = scala.collection.immutable.Map$.MODULE$.<String, String>empty()
                .updated(DeltaOptions.MAX_RECORDS_PER_FILE(), Long.toString(maxRecordsPerFile));
        DeltaOptions deltaOptions = new DeltaOptions(options, rows.sparkSession().sessionState().conf());
        return new BatchAppend(txn, txn.writeFiles(rows, Option.apply(deltaOptions)));
    }

    /**
     * Deletes the written files without committing them: a batch that writes its records again, from
     * another plan, leaves no files behind that no commit names. Returns how many it deleted.
     */
    public int abandon() throws java.io.IOException {
        DeltaLog log = txn.deltaLog();
        org.apache.hadoop.fs.FileSystem fs = log.dataPath().getFileSystem(log.newDeltaHadoopConf());
        int deleted = 0;
        for (FileAction file : CollectionConverters.asJava(files)) {
            org.apache.hadoop.fs.Path path = org.apache.spark.sql.delta.util.DeltaFileOperations$.MODULE$
                    .absolutePath(log.dataPath().toString(), file.path());
            if (fs.delete(path, false)) {
                deleted++;
            }
        }
        return deleted;
    }

    /** How many data files the write produced. */
    public int files() {
        return files.size();
    }

    /** Commits the written files with userMetadata as a blind append; returns the committed version. */
    public long commit(String userMetadata) {
        return commit(userMetadata, null, -1L);
    }

    /**
     * Commits the written files with userMetadata, and with appId's txn version when appId is given;
     * returns the committed version.
     */
    public long commit(String userMetadata, String appId, long txnVersion) {
        List<Action> actions = new ArrayList<>(CollectionConverters.asJava(files));
        if (appId != null) {
            actions.add(new SetTransaction(appId, txnVersion, Option.apply((Object) Long.valueOf(System.currentTimeMillis()))));
        }
        Option<String> none = Option.empty();
        DeltaOperations.Write operation = new DeltaOperations.Write(SaveMode.Append, Option.empty(), none,
                Option.apply(userMetadata), Option.empty(), Option.empty(), Option.empty(), none, none);
        return txn.commit(CollectionConverters.asScala(actions).toList(), operation);
    }
}
