"""A store's `--once` run over a backlog in a JVM that has already run the store once.

`python -m deltastate.bench.warm_run STORE WARM_UP_TOPIC TOPIC` runs STORE over WARM_UP_TOPIC into
its own storage (untimed), then over TOPIC into another, in one process and one Spark session, and
prints one JSON line like `deltastate run --json`'s plus wall_seconds (from the measured run's start).
The measured run meets a JVM whose JIT has compiled Spark's, Delta's and Kafka's code: its rate is
the store's steady state, the figure a running store shows when a burst arrives. The storage root
is the settings' (DELTASTATE_STORAGE); the two runs write under it in warm-up/ and run/.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from pathlib import Path

from deltastate.config import Settings, load_settings


def run_warm(settings: Settings, store: str, warm_up_topic: str, topic: str) -> dict:
    from deltastate.engine import run_store

    root = Path(settings.storage_root)
    run_store(dataclasses.replace(settings, storage_root=str(root / "warm-up")), store, once=True, topic=warm_up_topic)
    started = time.monotonic()
    result = run_store(dataclasses.replace(settings, storage_root=str(root / "run")), store, once=True, topic=topic)
    wall = time.monotonic() - started
    return {"store": store, "records_in": result.records_in, "applied": result.applied,
            "dead_lettered": result.dead_lettered, "late": result.late, "seconds": round(result.seconds, 3),
            "wall_seconds": round(wall, 3)}


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: python -m deltastate.bench.warm_run STORE WARM_UP_TOPIC TOPIC", file=sys.stderr)
        return 2
    print(json.dumps(run_warm(load_settings(), *argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
