"""A continuous `deltastate run` (a real CLI process) stopped with SIGTERM mid-stream, restarted, fed
while it runs, and compared with the reference: no event lost, none counted twice. SIGKILL of a
continuous run, before, during and after a micro-batch's commit, is test_crash_trials.py's."""


import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.reference import Expected, expected
from support.store_checks import (
    STORE,
    assert_counts,
    assert_state,
    event,
    generated,
    intake_totals,
    new_topic,
    produce,
    published_state,
)

from deltastate.bench.soak import child_env, group_alive
from deltastate.config import PROJECT_ROOT, Settings, load_settings

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]


# -- continuous CLI run: stop, crash, restart ------------------------------------------------------
def _cli_env(settings: Settings) -> dict[str, str]:
    env = child_env(settings)
    assert load_settings(env) == settings  # the subprocess sees exactly this test's settings
    return env


class CliRun:
    """`deltastate run player_stats --continuous` as a subprocess in its own process group."""

    def __init__(self, settings: Settings, topic: str, log: Path) -> None:
        self.log = log
        self._fh = open(log, "wb")
        # The venv's interpreter directly (what `uv run python` resolves to): signals reach the CLI
        # process itself, and no uv sync runs while other work edits the project.
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "deltastate.cli.main", "run", STORE, "--continuous", "--trigger", "1s",
             "--topic", topic],
            cwd=PROJECT_ROOT, env=_cli_env(settings), stdout=self._fh, stderr=subprocess.STDOUT,
            start_new_session=True)
        self.pgid = self.proc.pid

    def tail(self, chars: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-chars:]

    def check_running(self) -> None:
        if self.proc.poll() is not None:
            raise AssertionError(f"the run exited early with {self.proc.returncode}:\n{self.tail()}")

    def _wait_group(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while group_alive(self.pgid):
            if time.monotonic() > deadline:
                os.killpg(self.pgid, signal.SIGKILL)
                raise AssertionError(f"process group {self.pgid} still alive after {timeout}s:\n{self.tail()}")
            time.sleep(0.2)

    def terminate(self, timeout: float = 120) -> int:
        """SIGTERM the CLI process: it stops its queries and exits cleanly."""
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=timeout)
        self._wait_group(60)
        self._fh.close()
        return code

    def crash(self) -> None:
        """SIGKILL the CLI and its JVM at once: no shutdown of anything."""
        os.killpg(self.pgid, signal.SIGKILL)
        self.proc.wait(timeout=60)
        self._wait_group(60)
        self._fh.close()

    def cleanup(self) -> None:
        if group_alive(self.pgid):
            os.killpg(self.pgid, signal.SIGKILL)
            self._wait_group(30)
        if not self._fh.closed:
            self._fh.close()


def _batch_ids(settings: Settings, query: str, log: str) -> list[int]:
    folder = Path(settings.checkpoint_path(STORE)) / query / log
    return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit()) if folder.is_dir() else []


def _commits(settings: Settings, query: str = "stream") -> int:
    return len(_batch_ids(settings, query, "commits"))


def _in_flight(settings: Settings, query: str = "stream") -> bool:
    """A micro-batch is planned (offsets log written) but not committed yet: mid-stream."""
    offsets, commits = _batch_ids(settings, query, "offsets"), _batch_ids(settings, query, "commits")
    return bool(offsets) and (not commits or offsets[-1] > commits[-1])


def _committed_offsets(settings: Settings, query: str, topic: str) -> dict[int, int]:
    """Next offset per partition after the query's latest committed micro-batch ({} before any)."""
    done = _batch_ids(settings, query, "commits")
    if not done:
        return {}
    path = Path(settings.checkpoint_path(STORE)) / query / "offsets" / str(done[-1])
    lines = path.read_text().splitlines()  # v1, batch metadata, then one line per source
    return {int(p): int(o) for p, o in json.loads(lines[-1])[topic].items()}


def _wait_for(what: str, condition, run: CliRun, timeout: float, every: float = 0.25) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        run.check_running()
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}:\n{run.tail()}")
        time.sleep(every)


@pytest.fixture()
def cli_runs() -> Iterator[list[CliRun]]:
    runs: list[CliRun] = []
    yield runs
    for run in runs:
        run.cleanup()


def test_continuous_run_stopped_and_restarted(broker: str, spark, make_settings, topic: str,
                                             tmp_path: Path, cli_runs: list[CliRun]) -> None:
    """`deltastate run --continuous` in a subprocess, fed while it runs: SIGTERM while a micro-batch
    is in flight, restart, more records, catch up, and compare."""
    # The run copies its audits to the intake table every second: caught_up sees the last batch's
    # audit a second after its commit.
    settings = make_settings(audit_flush_seconds=1.0)
    ref = new_topic(settings, broker, topic)
    stream = generated(4_000, 500, seed=41, tombstones=0.02)
    chunks = [stream[i:i + 500] for i in range(0, len(stream), 500)]
    began = time.monotonic()

    def phase(what: str) -> None:  # shown with -s, or on failure
        print(f"[{time.monotonic() - began:6.1f}s] {what}; changelog commits {_commits(settings)}", flush=True)

    def produce_next(n: int = 1, pause: float = 0.0) -> None:
        for _ in range(n):
            produce(settings, topic, chunks.pop(0), ref)
            time.sleep(pause)

    def start(name: str) -> CliRun:
        run = CliRun(settings, topic, tmp_path / f"{name}.log")
        cli_runs.append(run)
        return run

    def end_offsets() -> dict[int, int]:  # a fresh topic: offsets count from 0 per partition
        return dict(Counter(r.partition for r in ref.records))

    def caught_up(exp: Expected) -> bool:  # the cheap checkpoint check first, then the audit table
        return (_committed_offsets(settings, "stream", topic) == end_offsets()
                and intake_totals(spark, settings)["records_in"] >= exp.records_in)

    def wait_mid_batch(run: CliRun) -> None:
        """Until a micro-batch is planned but not committed; if the stream goes idle first, feed it
        one more record now and then."""
        waited, nudges = time.monotonic(), 0
        while not _in_flight(settings):
            run.check_running()
            assert time.monotonic() - waited < 90, f"no micro-batch in flight after 90s:\n{run.tail()}"
            if time.monotonic() - waited > 10 * (nudges + 1):
                nudges += 1
                produce(settings, topic, [(b"nudge", event("nudge", nudges, nudges))], ref)
            time.sleep(0.1)

    # 1: fed while running, stopped with SIGTERM while a micro-batch is in flight.
    produce_next(2)
    run = start("run1")
    _wait_for("a first changelog commit", lambda: _commits(settings) >= 1, run, timeout=180)
    phase("run 1 committed")
    produce_next(2, pause=0.3)
    wait_mid_batch(run)
    assert run.terminate() == 0, run.tail()
    phase("run 1 stopped (SIGTERM) mid-batch")

    # 2: restarted, fed, and left to catch up with everything produced.
    produce_next(2)
    phase("produced")
    after_term = _commits(settings)
    run = start("run2")
    _wait_for("a changelog commit after the restart", lambda: _commits(settings) > after_term, run, timeout=180)
    phase("run 2 committed")
    produce_next(2, pause=0.3)
    exp = expected(ref.records, settings.max_value_bytes)
    _wait_for("every produced record audited and committed", lambda: caught_up(exp), run,
              timeout=180, every=0.25)
    phase("run 2 caught up")
    assert_counts(exp, None, spark, settings)  # no record lost or counted twice
    assert_state(published_state(spark, settings), exp)
    phase("checked")

