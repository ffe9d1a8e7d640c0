"""Local JVM infrastructure: Maven-fetched jars and a single-node Kafka broker for development and tests."""
