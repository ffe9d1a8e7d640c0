"""Spark's own floor for a backlog: the least a Spark stateful query pays to read the same topic.

`python -m deltastate.bench.backlog_floor TOPIC [WARM_UP_TOPIC]` reads TOPIC with the store's Kafka
source (engine/common/source.py: the same consumer options) into a trivial stateful query, a count
per Kafka key in the session's state store, in update mode, whose batch writer only counts the
changed keys, writing nothing; one availableNow run, as `deltastate run --once` reads a backlog.
It prints one JSON line: records and processing seconds (the query's start to its end); with
WARM_UP_TOPIC read first (untimed, same process), also the wall clock from the measured query's
start (without, the caller times the process). `deltastate bench peers --against-floor` runs it in a process of its own
after the two peers, so deltastate's rate can be set against Spark's on the same backlog.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time

from deltastate.config import Settings, load_settings


def count_per_key(settings: Settings, topic: str) -> int:
    """Reads the topic to its end through a count per Kafka key; returns the records read."""
    from deltastate.engine.common.source import source_stream
    from deltastate.infra.spark import get_spark

    spark = get_spark(settings)
    counts = source_stream(spark, settings, topic).groupBy("key").count()
    with tempfile.TemporaryDirectory(prefix="deltastate-floor-") as checkpoint:
        query = (counts.writeStream.outputMode("update").option("checkpointLocation", checkpoint)
                 .trigger(availableNow=True).foreachBatch(lambda batch, _: batch.count()).start())
        query.awaitTermination()
        return sum(int(p["numInputRows"]) for p in query.recentProgress)


def run_backlog_floor(settings: Settings, topic: str, warm_up_topic: str | None = None) -> dict:
    from deltastate.infra.spark import get_spark

    get_spark(settings)  # the session's start is not the query's: `deltastate run` times from its query too
    if warm_up_topic:
        count_per_key(settings, warm_up_topic)
    started = time.monotonic()
    records = count_per_key(settings, topic)
    ended = time.monotonic()
    found = {"records": records, "seconds": round(ended - started, 3)}
    return {**found, "wall_seconds": found["seconds"]} if warm_up_topic else found


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 2):
        print("usage: python -m deltastate.bench.backlog_floor TOPIC [WARM_UP_TOPIC]", file=sys.stderr)
        return 2
    print(json.dumps(run_backlog_floor(load_settings(), argv[0], argv[1] if len(argv) == 2 else None)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
