package io.deltastate.peers;

import java.lang.management.ManagementFactory;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.Metric;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.processor.TimestampExtractor;

/**
 * What every peer topology shares: the arguments, one stream thread with a 10 MB record cache and
 * RocksDB stores logged to changelog topics (Kafka Streams' defaults otherwise, at-least-once), a
 * count of the records read that ends the run once the whole backlog is in, and the one JSON line
 * the bench reads: records, applied (records handed to the aggregation), dropped (Kafka Streams'
 * dropped-records-total: late records, counted once per window they missed), processing_seconds
 * (first record to closed, offsets committed) and wall_seconds (JVM start to closed).
 *
 * Args: bootstrap topic application-id state-dir expected-records [warm-up-topic warm-up-records].
 * With a warm-up topic, the same topology first reads that topic to its end under its own
 * application id and state, untimed, in this JVM: the measured run then meets a JVM whose JIT has
 * compiled Kafka Streams' and RocksDB's code, and wall_seconds counts from the measured run's start.
 */
final class PeerRun {
    private PeerRun() {}

    static final ObjectMapper JSON = new ObjectMapper();

    /** Builds a peer's aggregation over the records of its topic; counts what it aggregates in applied. */
    interface Topology {
        void build(KStream<String, byte[]> records, AtomicLong applied);
    }

    /** A JSON value's document, or null when the value is absent or not JSON. */
    static JsonNode parse(byte[] value) {
        if (value == null) {
            return null;
        }
        try {
            return JSON.readTree(value);
        } catch (java.io.IOException e) {
            return null;
        }
    }

    /** The event time of windowed stores: the value's "ts" (epoch ms); the partition's time otherwise. */
    static final class EventTime implements TimestampExtractor {
        @Override
        public long extract(ConsumerRecord<Object, Object> record, long partitionTime) {
            JsonNode doc = record.value() instanceof byte[] bytes ? parse(bytes) : null;
            JsonNode ts = doc == null ? null : doc.get("ts");
            return ts != null && ts.canConvertToLong() ? ts.asLong() : Math.max(partitionTime, 0L);
        }
    }

    static void main(String[] args, Topology topology, boolean eventTime) throws Exception {
        String bootstrap = args[0];
        String appId = args[2];
        String stateDir = args[3];
        long started = ManagementFactory.getRuntimeMXBean().getStartTime();
        if (args.length >= 7) {
            read(bootstrap, args[5], appId + "-warm-up", stateDir + "/warm-up", Long.parseLong(args[6]), topology,
                 eventTime);
            started = System.currentTimeMillis();
        }
        long[] figures = read(bootstrap, args[1], appId, stateDir + "/run", Long.parseLong(args[4]), topology,
                              eventTime);
        double wall = (System.currentTimeMillis() - started) / 1e3;
        System.out.printf("{\"records\": %d, \"applied\": %d, \"dropped\": %d, \"processing_seconds\": %.3f, "
                          + "\"wall_seconds\": %.3f}%n", figures[0], figures[1], figures[2], figures[3] / 1e9, wall);
    }

    /** Reads topic to its expected count and closes: records read, applied, dropped, processing nanoseconds. */
    private static long[] read(String bootstrap, String topic, String appId, String stateDir, long expected,
                               Topology topology, boolean eventTime) throws InterruptedException {
        AtomicLong read = new AtomicLong();
        AtomicLong applied = new AtomicLong();
        AtomicLong firstAt = new AtomicLong();
        CountDownLatch done = new CountDownLatch(1);

        Consumed<String, byte[]> consumed = Consumed.with(Serdes.String(), Serdes.ByteArray());
        if (eventTime) {
            consumed = consumed.withTimestampExtractor(new EventTime());
        }
        StreamsBuilder builder = new StreamsBuilder();
        KStream<String, byte[]> records = builder.stream(topic, consumed)
            .peek((key, value) -> {
                firstAt.compareAndSet(0, System.nanoTime());
                if (read.incrementAndGet() == expected) {
                    done.countDown();
                }
            });
        topology.build(records, applied);

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
            throw new IllegalStateException("read " + read.get() + " of " + expected + " records of " + topic
                                            + " in 30 minutes");
        }
        long dropped = droppedRecords(streams.metrics());
        streams.close();  // commits the offsets and flushes the cache to the store and its changelog
        return new long[] {read.get(), applied.get(), dropped, System.nanoTime() - firstAt.get()};
    }

    /** The sum of the tasks' dropped-records-total. */
    private static long droppedRecords(Map<MetricName, ? extends Metric> metrics) {
        double total = 0;
        for (Map.Entry<MetricName, ? extends Metric> entry : metrics.entrySet()) {
            MetricName name = entry.getKey();
            if (name.name().equals("dropped-records-total") && name.group().equals("stream-task-metrics")
                    && entry.getValue().metricValue() instanceof Number n) {
                total += n.doubleValue();
            }
        }
        return (long) total;
    }
}
