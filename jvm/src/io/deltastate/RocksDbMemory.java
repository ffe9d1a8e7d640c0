package io.deltastate;

import java.lang.reflect.Field;
import java.lang.reflect.Method;
import java.util.ArrayList;
import java.util.List;

import org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider;
import org.apache.spark.sql.execution.streaming.state.StateStore$;
import org.apache.spark.sql.execution.streaming.state.StateStoreProvider;
import org.apache.spark.sql.execution.streaming.state.StateStoreProviderId;
import scala.collection.mutable.HashMap;
import scala.jdk.javaapi.CollectionConverters;

/**
 * The memory RocksDB's memtables hold for a store, which Spark's state store metrics do not report
 * alone (its memoryUsedBytes adds them to the block cache and the table readers).
 *
 * Spark keeps the state store providers this JVM has loaded in StateStore's registry; a provider of
 * a store's checkpoint (its streaming state, and the live entries of a window or session store)
 * holds one RocksDB instance per state partition, and RocksDB answers "rocksdb.size-all-mem-tables"
 * for it. The registry and the instance are private to Spark, so they are read by reflection; a
 * Spark that renames them gives -1 (no figure), never an error in the store's run.
 */
public final class RocksDbMemory {
    private RocksDbMemory() {}

    private static final String MEMTABLES = "rocksdb.size-all-mem-tables";

    /** Bytes in the memtables of every loaded RocksDB state partition under checkpointRoot; -1 when none is loaded. */
    public static long memtableBytes(String checkpointRoot) {
        try {
            long total = -1;
            for (StateStoreProvider provider : providersUnder(checkpointRoot)) {
                Object rocksDb = field(RocksDBStateStoreProvider.class, "rocksDB").get(provider);
                if (rocksDb == null) {
                    continue;  // a provider that has not opened its instance yet
                }
                Object db = field(rocksDb.getClass(), "db").get(rocksDb);
                if (db instanceof org.rocksdb.RocksDB native_ && native_.isOwningHandle()) {
                    total = Math.max(total, 0) + native_.getLongProperty(MEMTABLES);
                }
            }
            return total;
        } catch (ReflectiveOperationException | org.rocksdb.RocksDBException | RuntimeException e) {
            return -1;
        }
    }

    @SuppressWarnings("unchecked")
    private static List<StateStoreProvider> providersUnder(String checkpointRoot) throws ReflectiveOperationException {
        Method registry = StateStore$.class.getDeclaredMethod("loadedProviders");
        registry.setAccessible(true);
        HashMap<StateStoreProviderId, StateStoreProvider> loaded =
            (HashMap<StateStoreProviderId, StateStoreProvider>) registry.invoke(StateStore$.MODULE$);
        List<StateStoreProvider> out = new ArrayList<>();
        synchronized (loaded) {  // Spark guards the registry with its own lock
            for (var entry : CollectionConverters.asJava(loaded).entrySet()) {
                String root = entry.getKey().storeId().checkpointRootLocation();
                if (entry.getValue() instanceof RocksDBStateStoreProvider && under(root, checkpointRoot)) {
                    out.add(entry.getValue());
                }
            }
        }
        return out;
    }

    /** A state location belongs to the checkpoint when it is the checkpoint's folder or inside it (any URI scheme). */
    static boolean under(String location, String checkpointRoot) {
        String root = strip(checkpointRoot);
        String path = strip(location);
        return path.equals(root) || path.startsWith(root + "/");
    }

    private static String strip(String location) {
        String path = location.replaceFirst("^[a-zA-Z][a-zA-Z0-9+.-]*:(//)?", "/").replaceAll("/+", "/");
        return path.endsWith("/") ? path.substring(0, path.length() - 1) : path;
    }

    private static Field field(Class<?> owner, String name) throws NoSuchFieldException {
        Field f = owner.getDeclaredField(name);
        f.setAccessible(true);
        return f;
    }
}
