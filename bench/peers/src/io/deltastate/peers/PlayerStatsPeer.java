package io.deltastate.peers;

import java.lang.management.ManagementFactory;
import java.nio.ByteBuffer;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.state.KeyValueStore;

/**
 * The player_stats store as a Kafka Streams application: per player, games (count), total_score
 * (sum of score), best_score (max of score) and last_played (max of ts), from the JSON game results
 * deltastate's player_stats reads. One stream thread, a 10 MB record cache, a RocksDB store logged
 * to a changelog topic: Kafka Streams' defaults otherwise (at-least-once).
 *
 * Args: bootstrap topic application-id state-dir expected-records. Runs until it has read
 * expected-records records, closes (committing), and prints one JSON line: records, applied,
 * not_applied (tombstones, which the aggregate skips, and values that are not a game result),
 * processing_seconds (first record to closed) and wall_seconds (JVM start to closed).
 */
public final class PlayerStatsPeer {
    private PlayerStatsPeer() {}

    private static final ObjectMapper JSON = new ObjectMapper();

    /** games, total_score, best_score, last_played as four longs. */
    private static final Serde<long[]> STATS = Serdes.serdeFrom(
        (topic, stats) -> {
            ByteBuffer out = ByteBuffer.allocate(32);
            for (long v : stats) {
                out.putLong(v);
            }
            return out.array();
        },
        (topic, bytes) -> {
            ByteBuffer in = ByteBuffer.wrap(bytes);
            return new long[] {in.getLong(), in.getLong(), in.getLong(), in.getLong()};
        });

    /** A game result's score and ts, or null when the value is not a game result. */
    static long[] parse(byte[] value) {
        try {
            JsonNode doc = JSON.readTree(value);
            JsonNode score = doc.get("score");
            JsonNode ts = doc.get("ts");
            if (score == null || !score.canConvertToLong() || ts == null || !ts.canConvertToLong()) {
                return null;
            }
            return new long[] {score.asLong(), ts.asLong()};
        } catch (java.io.IOException e) {
            return null;
        }
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        String appId = args[2];
        String stateDir = args[3];
        long expected = Long.parseLong(args[4]);

        AtomicLong read = new AtomicLong();
        AtomicLong applied = new AtomicLong();
        AtomicLong firstAt = new AtomicLong();
        CountDownLatch done = new CountDownLatch(1);

        StreamsBuilder builder = new StreamsBuilder();
        builder.stream(topic, Consumed.with(Serdes.String(), Serdes.ByteArray()))
            .peek((key, value) -> {
                firstAt.compareAndSet(0, System.nanoTime());
                if (read.incrementAndGet() == expected) {
                    done.countDown();
                }
            })
            .filter((key, value) -> value != null)  // a tombstone: the aggregate skips it too
            .mapValues(PlayerStatsPeer::parse)
            .filter((key, result) -> result != null)
            .groupByKey(Grouped.with(Serdes.String(), Serdes.serdeFrom(
                (t, r) -> ByteBuffer.allocate(16).putLong(r[0]).putLong(r[1]).array(),
                (t, b) -> { ByteBuffer in = ByteBuffer.wrap(b); return new long[] {in.getLong(), in.getLong()}; })))
            .aggregate(
                () -> new long[] {0L, 0L, Long.MIN_VALUE, Long.MIN_VALUE},
                (key, result, stats) -> {
                    applied.incrementAndGet();
                    return new long[] {stats[0] + 1, stats[1] + result[0], Math.max(stats[2], result[0]),
                                       Math.max(stats[3], result[1])};
                },
                Materialized.<String, long[], KeyValueStore<Bytes, byte[]>>as("player-stats")
                    .withKeySerde(Serdes.String()).withValueSerde(STATS));

        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, appId);
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
        props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
        props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 10L * 1024 * 1024);
        props.put("auto.offset.reset", "earliest");

        KafkaStreams streams = new KafkaStreams(builder.build(), props);
        streams.start();
        if (!done.await(30, TimeUnit.MINUTES)) {
            streams.close();
            throw new IllegalStateException("read " + read.get() + " of " + expected + " records in 30 minutes");
        }
        streams.close();  // commits the offsets and flushes the cache to the store and its changelog
        long end = System.nanoTime();
        double processing = (end - firstAt.get()) / 1e9;
        double wall = (System.currentTimeMillis() - ManagementFactory.getRuntimeMXBean().getStartTime()) / 1e3;
        System.out.printf("{\"records\": %d, \"applied\": %d, \"not_applied\": %d, \"processing_seconds\": %.3f, "
                          + "\"wall_seconds\": %.3f}%n", read.get(), applied.get(), read.get() - applied.get(),
                          processing, wall);
    }
}
