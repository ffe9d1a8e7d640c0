package io.deltastate.peers;

import java.nio.ByteBuffer;
import java.time.Duration;

import com.fasterxml.jackson.databind.JsonNode;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.TimeWindows;
import org.apache.kafka.streams.state.WindowStore;

/**
 * The trade_stats store as a Kafka Streams application: per symbol over hopping windows of 5 s
 * advancing 1 s with 2 s of grace (event time from the value's ts), the count, sum, min and max of
 * price (the average follows from them) and the sum of qty, in a RocksDB window store retained 1 h
 * (PeerRun: the shared settings, the arguments and the figures printed).
 */
public final class TradeStatsPeer {
    private TradeStatsPeer() {}

    /** count, sum_price, min_price, max_price, volume. */
    private static final Serde<double[]> STATS = Serdes.serdeFrom(
        (topic, stats) -> {
            ByteBuffer out = ByteBuffer.allocate(8 * stats.length);
            for (double v : stats) {
                out.putDouble(v);
            }
            return out.array();
        },
        (topic, bytes) -> {
            ByteBuffer in = ByteBuffer.wrap(bytes);
            double[] stats = new double[bytes.length / 8];
            for (int i = 0; i < stats.length; i++) {
                stats[i] = in.getDouble();
            }
            return stats;
        });

    /** A trade's price and qty, or null when the value is not a trade. */
    static double[] parse(byte[] value) {
        JsonNode doc = PeerRun.parse(value);
        JsonNode price = doc == null ? null : doc.get("price");
        JsonNode qty = doc == null ? null : doc.get("qty");
        if (price == null || !price.isNumber() || qty == null || !qty.canConvertToLong()) {
            return null;
        }
        return new double[] {price.asDouble(), qty.asLong()};
    }

    public static void main(String[] args) throws Exception {
        PeerRun.main(args, (records, applied) -> records
            .mapValues(TradeStatsPeer::parse)
            .filter((key, trade) -> trade != null)
            .peek((key, trade) -> applied.incrementAndGet())
            .groupByKey(Grouped.with(Serdes.String(), STATS))
            .windowedBy(TimeWindows.ofSizeAndGrace(Duration.ofSeconds(5), Duration.ofSeconds(2))
                .advanceBy(Duration.ofSeconds(1)))
            .aggregate(
                () -> new double[] {0, 0, Double.POSITIVE_INFINITY, Double.NEGATIVE_INFINITY, 0},
                (key, trade, stats) -> new double[] {stats[0] + 1, stats[1] + trade[0], Math.min(stats[2], trade[0]),
                                                     Math.max(stats[3], trade[0]), stats[4] + trade[1]},
                Materialized.<String, double[], WindowStore<Bytes, byte[]>>as("trade-stats")
                    .withKeySerde(Serdes.String()).withValueSerde(STATS)
                    .withRetention(Duration.ofHours(1))), true);
    }
}
