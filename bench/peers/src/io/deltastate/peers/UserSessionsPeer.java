package io.deltastate.peers;

import java.nio.charset.StandardCharsets;
import java.time.Duration;

import com.fasterxml.jackson.databind.JsonNode;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.SessionWindows;
import org.apache.kafka.streams.state.SessionStore;

/**
 * The user_sessions store as a Kafka Streams application: per user, sessions of clicks at most
 * 30 min apart with 5 min of grace (event time from the value's ts), each with its start, end,
 * event count and last page (the page of its newest click), in a RocksDB session store retained
 * 24 h (PeerRun: the shared settings, the arguments and the figures printed).
 */
public final class UserSessionsPeer {
    private UserSessionsPeer() {}

    /** A session: start, end, count, and the page of its newest click. */
    record Session(long start, long end, long count, String lastPage) {
        Session add(Session other) {
            String page = other.end >= end ? other.lastPage : lastPage;
            return new Session(Math.min(start, other.start), Math.max(end, other.end), count + other.count, page);
        }
    }

    private static final Serde<Session> SESSION = Serdes.serdeFrom(
        (topic, s) -> {
            byte[] page = s.lastPage().getBytes(StandardCharsets.UTF_8);
            return java.nio.ByteBuffer.allocate(24 + page.length).putLong(s.start()).putLong(s.end())
                .putLong(s.count()).put(page).array();
        },
        (topic, bytes) -> {
            java.nio.ByteBuffer in = java.nio.ByteBuffer.wrap(bytes);
            long start = in.getLong();
            long end = in.getLong();
            long count = in.getLong();
            return new Session(start, end, count, new String(bytes, 24, bytes.length - 24, StandardCharsets.UTF_8));
        });

    /** A click as a one-click session, or null when the value is not a click. */
    static Session parse(byte[] value) {
        JsonNode doc = PeerRun.parse(value);
        JsonNode ts = doc == null ? null : doc.get("ts");
        JsonNode page = doc == null ? null : doc.get("page");
        if (ts == null || !ts.canConvertToLong() || page == null || !page.isTextual()) {
            return null;
        }
        return new Session(ts.asLong(), ts.asLong(), 1, page.asText());
    }

    public static void main(String[] args) throws Exception {
        PeerRun.main(args, (records, applied) -> records
            .mapValues(UserSessionsPeer::parse)
            .filter((key, click) -> click != null)
            .peek((key, click) -> applied.incrementAndGet())
            .groupByKey(Grouped.with(Serdes.String(), SESSION))
            .windowedBy(SessionWindows.ofInactivityGapAndGrace(Duration.ofMinutes(30), Duration.ofMinutes(5)))
            .aggregate(
                () -> null,
                (key, click, session) -> session == null ? click : session.add(click),
                (key, left, right) -> left == null ? right : right == null ? left : left.add(right),
                Materialized.<String, Session, SessionStore<Bytes, byte[]>>as("user-sessions")
                    .withKeySerde(Serdes.String()).withValueSerde(SESSION)
                    .withRetention(Duration.ofHours(24))), true);
    }
}
