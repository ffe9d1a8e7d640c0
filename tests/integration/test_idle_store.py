"""An idle continuous store through the real broker, Spark and Delta: over 30 seconds with nothing
to read it runs no micro-batch and makes no Delta commit (each commit would cost a second of a
core), its CPU is measured and printed, and it still applies the next record produced."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
from support.reference import expected
from support.store_checks import STORE, generated, new_topic, produce

from deltastate.changelog.audit_log import copied_through
from deltastate.changelog.deltalog import DeltaLog
from deltastate.engine import run_store

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]
IDLE_SECONDS = 30


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def versions(settings) -> dict[str, int | None]:
    log = DeltaLog(ttl=0.0)
    out = {}
    for table in ("changelog", "deadletter", "intake"):
        newest = log.newest_commit(settings.table_path(STORE, table))
        out[table] = None if newest is None else newest.version
    return out


def test_an_idle_continuous_store_runs_no_batch_and_commits_nothing(broker, spark, make_settings, topic, capsys):
    # Audits are copied to the intake table at the first check after a batch, so the copy of the
    # last batch lands before the idle window: an idle store has nothing to copy.
    settings = make_settings(audit_flush_seconds=0)
    ref = new_topic(settings, broker, topic)
    produce(settings, topic, generated(300, 30, seed=71), ref)
    reports, stop = [], threading.Event()
    runner = threading.Thread(target=run_store, args=(settings, STORE), daemon=True,
                              kwargs={"once": False, "trigger": "1 second", "topic": topic, "stop_event": stop,
                                      "listener": reports.append})
    runner.start()
    try:
        deadline = time.monotonic() + 120
        while sum(r.records_in for r in reports) < len(ref.records) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert sum(r.records_in for r in reports) == len(ref.records)
        # The copy of the last batch's audit lands at the run's next check (seconds on a busy machine).
        intake, deadline = settings.table_path(STORE, "intake"), time.monotonic() + 120
        while copied_through(spark, intake) < versions(settings)["changelog"] and time.monotonic() < deadline:
            time.sleep(0.5)
        before, batches = versions(settings), len(reports)
        assert copied_through(spark, intake) == before["changelog"], "the last batch's audit was not copied"
        jvm = int(spark._jvm.java.lang.ProcessHandle.current().pid())
        cpu_before = cpu_seconds(jvm) + cpu_seconds(os.getpid())
        time.sleep(IDLE_SECONDS)
        cpu = cpu_seconds(jvm) + cpu_seconds(os.getpid()) - cpu_before
        assert len(reports) == batches, "an idle store ran micro-batches"
        assert versions(settings) == before, "an idle store made Delta commits"
        with capsys.disabled():
            print(f"\nidle store: {cpu:.2f} CPU s over {IDLE_SECONDS} s ({1000 * cpu / IDLE_SECONDS:.1f} ms per 1 s "
                  "trigger), driver JVM and Python")

        produce(settings, topic, generated(20, 5, seed=72), ref)  # still alive: the next record is applied
        deadline = time.monotonic() + 60
        while sum(r.records_in for r in reports) < len(ref.records) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert sum(r.records_in for r in reports) == len(ref.records)
        assert sum(r.applied for r in reports) == expected(ref.records).applied
    finally:
        stop.set()
        runner.join(120)
    after = versions(settings)
    assert after["changelog"] > before["changelog"] and after["intake"] > before["intake"]
