"""The resident driver: one long-lived Spark driver per home that runs `deltastate run STORE --once`
and the Airflow operator's `deltastate job ...` (DELTASTATE_SPARK_DEPLOY=resident), one at a time.

A new process pays for its JVM, its Spark session and, above all, the JIT: a cold process spends
most of a backlog run compiling Spark's, Delta's and Kafka's code. The resident driver keeps that
compiled code between commands, as a Kafka Streams application keeps its JVM between records.

  protocol  where a home's driver listens, and what a client and the driver must agree on
  server    the driver: a Spark session and a socket; each command runs in it as in a new process
  client    sends a command to the home's driver and relays its output and exit status
"""
