"""Spark's floor (freshness.run_floor) in a process of its own, for `bench freshness --against-floor`.

`python -m deltastate.bench.floor_run RATE SECONDS TRIGGER WARMUP_SECONDS` measures the floor
against the settings' broker (which the calling bench has brought up) and prints its figures as one
JSON line.
"""

from __future__ import annotations

import dataclasses
import json
import sys

from deltastate.config import load_settings


def main(argv: list[str]) -> int:
    from deltastate.bench.freshness import run_floor

    if len(argv) != 4:
        print("usage: python -m deltastate.bench.floor_run RATE SECONDS TRIGGER WARMUP_SECONDS", file=sys.stderr)
        return 2
    rate, seconds, trigger, warmup = int(argv[0]), float(argv[1]), argv[2], float(argv[3])
    print(json.dumps(dataclasses.asdict(run_floor(load_settings(), rate, seconds, trigger, warmup_seconds=warmup))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
