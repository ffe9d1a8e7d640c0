"""Getting records into Kafka the way Java producers would, and knowing where they land.

- partitioner: Kafka's murmur2 key partitioner, so partitions can be predicted without a broker.
- producer:    a confluent_kafka producer configured like a Java client (murmur2, idempotent, acks=all).
- generators:  deterministic synthetic workloads (leaderboard game results, ...).
- decode:      Spark-side decoding and validation of source records.

Only the partitioner is re-exported here: it is dependency-free, and importing this package (as
`deltastate.ingest.decode` does) should not pull in numpy or librdkafka.
"""

from deltastate.ingest.partitioner import murmur2, partition_for, to_positive

__all__ = ["murmur2", "partition_for", "to_positive"]
