package io.deltastate.peers;

import java.nio.ByteBuffer;

import com.fasterxml.jackson.databind.JsonNode;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.state.KeyValueStore;

/**
 * The player_stats store as a Kafka Streams application: per player, games (count), total_score
 * (sum of score), best_score (max of score) and last_played (max of ts), from the JSON game results
 * deltastate's player_stats reads, in a RocksDB key-value store (PeerRun: the shared settings, the
 * arguments and the figures printed). Tombstones and values that are not a game result are not
 * applied.
 */
public final class PlayerStatsPeer {
    private PlayerStatsPeer() {}

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
        JsonNode doc = PeerRun.parse(value);
        JsonNode score = doc == null ? null : doc.get("score");
        JsonNode ts = doc == null ? null : doc.get("ts");
        if (score == null || !score.canConvertToLong() || ts == null || !ts.canConvertToLong()) {
            return null;
        }
        return new long[] {score.asLong(), ts.asLong()};
    }

    public static void main(String[] args) throws Exception {
        PeerRun.main(args, (records, applied) -> records
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
                    .withKeySerde(Serdes.String()).withValueSerde(STATS)), false);
    }
}
