"""What a run reports: one BatchReport per micro-batch to the caller's listener, and the run's
totals (RunResult) summed from them."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from deltastate.engine.common.lineage import Lineage


@dataclass(frozen=True)
class BatchReport:
    """One micro-batch: records read from Kafka and what became of them (records_in = applied +
    dead_lettered; late records are dead letters too), and the changelog records written, by op."""

    batch_id: int
    records_in: int
    applied: int
    dead_lettered: int
    tombstones: int
    late: int = 0
    changelog: dict[str, int] = field(default_factory=dict)
    # Seconds the batch writer spent per phase: key-value stores state (reading Kafka and updating
    # the state: the stateful plan runs when its output is first read) and commit (dead letters and
    # the one changelog commit); window and session stores read and state_and_commit (their windows
    # are computed inside the commit).
    phases: dict[str, float] = field(default_factory=dict)
    # The batch's audit row as committed (layout.INTAKE_COLUMNS, write_time the commit's end); None
    # for a batch that wrote nothing (a replay whose commit had landed).
    audit: dict | None = None

    @property
    def changelog_records(self) -> int:
        return sum(self.changelog.values())

    def describe(self) -> str:
        ops = ", ".join(f"{op}={n:,}" for op, n in sorted(self.changelog.items())) or "none"
        return (f"batch {self.batch_id:>5}: {self.records_in:>9,} records in, {self.applied:,} applied, "
                f"{self.dead_lettered:,} dead-lettered ({self.late:,} late), changelog {ops}")


BatchListener = Callable[[BatchReport], None]


@dataclass
class RunResult:
    store: str
    lineage: Lineage
    seconds: float = 0.0
    batches: int = 0  # micro-batches that wrote (a batch with no new records writes nothing)
    records_in: int = 0
    applied: int = 0
    dead_lettered: int = 0
    late: int = 0  # of the dead-lettered
    changelog_records: int = 0
    progress: list[dict] = field(default_factory=list)  # the query's StreamingQueryProgress events
    # The state keys the store's query started with (key-value stores; read back from the query).
    state_conf: dict[str, str | None] = field(default_factory=dict)
    stopped_by: str | None = None  # why a continuous run stopped on its own (a migration's fence)


def counting_listener(result: RunResult, listener: BatchListener | None) -> BatchListener:
    """A listener that adds each report to result's totals (reports come from the query's own
    thread), then passes it on."""
    lock = threading.Lock()

    def on_batch(report: BatchReport) -> None:
        with lock:
            result.batches += 1
            result.records_in += report.records_in
            result.applied += report.applied
            result.dead_lettered += report.dead_lettered
            result.late += report.late
            result.changelog_records += report.changelog_records
        if listener:
            listener(report)

    return on_batch
