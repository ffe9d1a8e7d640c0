"""Schedules and policy of the generated DAGs, from the environment (frozen, read at parse time
without touching any database or connection). A schedule of "none" leaves only manual triggers
(and, for publish, the changelog Assets)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta


@dataclass(frozen=True)
class DagOptions:
    run_schedule: str = "*/15 * * * *"       # store runs: available-now every 15 minutes
    compact_schedule: str = "0 3 * * *"      # compaction: nightly
    cleanup_schedule: str = "30 3 * * *"     # TTL / retention / tombstone cleanup: after compaction
    publish_schedule: str = "0 * * * *"      # publish: hourly, and whenever a changelog Asset updates
    owner: str = "deltastate"
    retries: int = 2
    retry_delay: timedelta = timedelta(minutes=1)
    start_date: datetime = datetime(2026, 1, 1, tzinfo=UTC)
    spark_conn_id: str = "deltastate_spark"

    @property
    def default_args(self) -> dict:
        return {"owner": self.owner, "retries": self.retries, "retry_delay": self.retry_delay}


def load_options(env: dict[str, str] | None = None) -> DagOptions:
    env = dict(os.environ if env is None else env)
    base = DagOptions()
    return DagOptions(
        run_schedule=env.get("DELTASTATE_RUN_SCHEDULE", base.run_schedule),
        compact_schedule=env.get("DELTASTATE_COMPACT_SCHEDULE", base.compact_schedule),
        cleanup_schedule=env.get("DELTASTATE_CLEANUP_SCHEDULE", base.cleanup_schedule),
        publish_schedule=env.get("DELTASTATE_PUBLISH_SCHEDULE", base.publish_schedule),
        retries=int(env.get("DELTASTATE_DAG_RETRIES", base.retries)),
        retry_delay=timedelta(seconds=float(env.get("DELTASTATE_DAG_RETRY_DELAY_S", base.retry_delay.total_seconds()))),
        spark_conn_id=env.get("DELTASTATE_SPARK_CONN_ID", base.spark_conn_id),
    )
