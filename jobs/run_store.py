"""spark-submit entry point for a store's streaming job; the logic lives in deltastate.engine.

    spark-submit jobs/run_store.py player_stats [--continuous] [--trigger 1s]

The session's jars and settings come from deltastate.infra.spark, so this runs the same code as
`deltastate run`, the Airflow DAGs and the tests."""

from __future__ import annotations

import sys

from deltastate.cli.main import cli

if __name__ == "__main__":
    sys.exit(cli(["run", *sys.argv[1:]]))
