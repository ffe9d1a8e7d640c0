"""Crash trials: a continuous `deltastate run` in a subprocess, killed with SIGKILL (the CLI and
its Spark JVM at once) at chosen moments of a micro-batch, restarted, again and again; then a
catch-up run and the checks: the state equals a fold of what was produced, the changelog holds no
duplicate (epoch, batch, key), and the intake audit counted every record once.

Moments, timed by watching the store query's checkpoint (offsets and commits logs) and the
intake audit table's _delta_log (a micro-batch appends its audit row last, after its changelog
rows and dead letters):
  before   the micro-batch is planned (offsets log entry) and its audit row has not landed
  during   the audit row landed and the checkpoint commit has not (the replay must be skipped)
  after    the checkpoint commit landed (a random pause of up to 0.5 s follows)
"""

from __future__ import annotations

import itertools
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from deltastate.changelog.intake import records_audited
from deltastate.changelog.layout import BATCH_ID, EPOCH
from deltastate.config import PROJECT_ROOT, Settings
from deltastate.engine.common.source import QUERY
from deltastate.errors import DeltastateError
from deltastate.infra.offset_log import batch_ids, log_folders
from deltastate.ingest.generators import encode, leaderboard_events
from deltastate.ingest.producer import ensure_topic, produce_records

MOMENTS = ("before", "during", "after")
KV = tuple[bytes, bytes | None]


@dataclass(frozen=True)
class SoakOptions:
    trials: int = 20
    events: int = 40_000  # one pass of the generator; the feed continues under the next seed
    players: int = 1_500
    tombstones: float = 0.02
    seed: int = 1
    chunk: int = 300  # records per produce call while a run is up
    trigger: str = "1s"
    partitions: int = 4
    store: str = "player_stats"
    moment_timeout: float = 300.0  # a guard only: a JVM start on a loaded 2-core machine takes minutes


@dataclass(frozen=True)
class Trial:
    number: int
    moment: str  # what was aimed at
    observed: str  # what the logs showed at the kill: planned/delta/committed batch ids
    seconds: float

    def line(self) -> str:
        return f"trial {self.number:>3}: kill {self.moment:<6} ({self.observed}) after {self.seconds:5.1f} s"


@dataclass
class SoakResult:
    trials: list[Trial] = field(default_factory=list)
    produced: int = 0
    audited: int = 0
    live_keys: int = 0
    wrong_keys: list[str] = field(default_factory=list)  # missing, extra or different, first few
    duplicates: int = 0
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.wrong_keys and self.duplicates == 0 and self.audited == self.produced

    def lines(self) -> list[str]:
        out = [t.line() for t in self.trials]
        out.append(f"{len(self.trials)} kill -9 trials; {self.produced:,} records produced, {self.audited:,} audited; "
                   f"{self.live_keys:,} live keys, {len(self.wrong_keys)} wrong; {self.duplicates} duplicate "
                   f"(epoch, batch, key) changelog records; {self.seconds:.0f} s: {'PASS' if self.ok else 'FAIL'}")
        return out


def _delta_batch(changelog: str) -> int:
    """The micro-batch id of the changelog's newest commit that carries a batch's audit (the batch's
    one commit); -1 before any."""
    from deltastate.changelog.audit_log import BatchAudit
    from deltastate.changelog.deltalog import user_metadata_newest_first

    for metadata in user_metadata_newest_first(changelog):
        audit = BatchAudit.from_metadata(metadata)
        if audit is not None:
            return int(audit.row[BATCH_ID])
    return -1


# A child runs small micro-batches for a minute or two. Its JVM spends the time loading and compiling
# Spark's own code, and on few cores C2 compiles compete with the batches, so C1 alone and the
# serial collector start a short run sooner; a long backlog wants C2 (bench/results.md).
SHORT_LIVED_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def child_env(settings: Settings) -> dict[str, str]:
    """The environment under which a short-lived `deltastate` subprocess (a crash trial, a test's CLI
    run) sees exactly these settings, with a small driver JVM tuned to start fast."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DELTASTATE_", "KAFKA_"))}
    env.update(settings.to_env(), DELTASTATE_DRIVER_MEMORY="1g", DELTASTATE_DRIVER_JAVA_OPTS=SHORT_LIVED_JVM,
               SPARK_LOCAL_DIRS=str(Path(settings.storage_root) / "spark-local"))
    return env


def group_alive(pgid: int) -> bool:
    """Any non-zombie process left in the process group (a CLI's Python and its Spark JVM)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            return True
    return False


class ContinuousRun:
    """`deltastate run STORE --continuous` in its own process group, so one SIGKILL takes the CLI
    and its JVM down together, as a machine failure would."""

    def __init__(self, settings: Settings, store: str, topic: str, trigger: str, log: Path) -> None:
        self.log = log
        self._fh = open(log, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "deltastate.cli.main", "run", store, "--continuous", "--trigger", trigger,
             "--topic", topic, "--quiet"],
            cwd=PROJECT_ROOT, env=child_env(settings), stdout=self._fh, stderr=subprocess.STDOUT,
            start_new_session=True)

    def tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:]

    def check(self) -> None:
        if self.proc.poll() is not None:
            raise DeltastateError(f"the continuous run exited early ({self.proc.returncode}):\n{self.tail()}")

    def kill(self) -> None:
        if self.proc.poll() is None or group_alive(self.proc.pid):
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait(timeout=60)
        deadline = time.monotonic() + 60
        while group_alive(self.proc.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        self._fh.close()


class _Feed:
    """Records to produce, without end (the leaderboard stream again under the next seed when one
    runs out: a trial may wait long for its moment), and what was produced so far, in order."""

    def __init__(self, settings: Settings, topic: str, options: SoakOptions) -> None:
        self.settings, self.topic, self.chunk = settings, topic, options.chunk
        self.source = itertools.chain.from_iterable(
            leaderboard_events(options.events, options.players, options.seed + n, tombstones=options.tombstones)
            for n in itertools.count())
        self.produced: list[KV] = []
        self.last = 0.0

    def step(self, every: float = 0.7, n: int | None = None) -> None:
        if time.monotonic() - self.last < every:
            return
        batch = [(k.encode(), None if ev is None else encode(ev))
                 for k, ev in itertools.islice(self.source, n or self.chunk)]
        result = produce_records(self.settings.kafka_bootstrap, self.topic, batch)
        if result.failed or result.delivered != len(batch):
            raise DeltastateError(f"soak topic {self.topic!r}: {result.failed} of {len(batch)} records not delivered")
        self.produced.extend(batch)
        self.last = time.monotonic()


def _kill_at(run: ContinuousRun, moment: str, ckpt: Path, table: str, feed: _Feed, rng: random.Random,
             timeout: float) -> str:
    """Waits for the moment (feeding the topic meanwhile), kills, returns what the logs showed."""
    offsets_dir, commits_dir = log_folders(ckpt / QUERY)
    # First until this run streams (plans or commits a batch): a JVM start on a busy machine can
    # take minutes, which the moment's own timeout should not count.
    before_start = (batch_ids(offsets_dir) or [-1])[-1], (batch_ids(commits_dir) or [-1])[-1]
    deadline = time.monotonic() + 2 * timeout
    while ((batch_ids(offsets_dir) or [-1])[-1], (batch_ids(commits_dir) or [-1])[-1]) == before_start:
        run.check()
        if time.monotonic() > deadline:
            raise DeltastateError(f"the run planned no micro-batch within {2 * timeout:.0f}s:\n{run.tail()}")
        feed.step(every=2.0)
        time.sleep(0.05)
    deadline = time.monotonic() + timeout
    while True:
        run.check()
        if time.monotonic() > deadline:
            raise DeltastateError(f"no '{moment}' moment within {timeout:.0f}s:\n{run.tail()}")
        planned, committed = (batch_ids(offsets_dir) or [-1])[-1], (batch_ids(commits_dir) or [-1])[-1]
        in_delta = _delta_batch(table)
        if planned > committed:  # batch `planned` is in flight
            if moment == "before" and in_delta < planned:
                break
            if moment == "during" and in_delta == planned:
                break
        elif moment == "after" and committed >= 0 and committed > before_start[1]:
            time.sleep(rng.uniform(0.0, 0.5))
            break
        feed.step()
        time.sleep(0.005)
    observed = (f"planned {(batch_ids(offsets_dir) or [-1])[-1]}, in Delta {_delta_batch(table)}, "
                f"committed {(batch_ids(commits_dir) or [-1])[-1]}")
    run.kill()
    return observed


def run_crash_trials(settings: Settings, topic: str, options: SoakOptions, workdir: Path, spark,
                     on_trial: Callable[[Trial], None] | None = None) -> tuple[SoakResult, list[KV]]:
    """The trials, the catch-up run (in this process, on `spark`) and the checks. Returns the result
    and the produced records in order, for callers that hold their own reference."""
    from deltastate.changelog.reader import latest_state
    from deltastate.engine import run_store
    from deltastate.stores import load_store

    began = time.monotonic()
    ensure_topic(settings.kafka_bootstrap, topic, options.partitions)
    rng = random.Random(options.seed)
    feed = _Feed(settings, topic, options)
    ckpt = Path(settings.checkpoint_path(options.store))
    table = settings.table_path(options.store, "changelog")
    result = SoakResult()
    feed.step(every=0.0, n=options.chunk * 4)
    for number in range(1, options.trials + 1):
        moment = MOMENTS[(number - 1) % len(MOMENTS)] if number <= len(MOMENTS) else rng.choice(MOMENTS)
        t0 = time.monotonic()
        run = ContinuousRun(settings, options.store, topic, options.trigger, workdir / f"run-{number}.log")
        try:
            observed = _kill_at(run, moment, ckpt, table, feed, rng, options.moment_timeout)
        finally:
            if run.proc.poll() is None:
                run.kill()
        trial = Trial(number, moment, observed, time.monotonic() - t0)
        result.trials.append(trial)
        if on_trial:
            on_trial(trial)
    feed.step(every=0.0)  # something new for the catch-up run to read after the last kill
    run_store(settings, options.store, once=True, topic=topic)

    store = load_store(settings, options.store)
    want = fold_reference(store, feed.produced)
    have = {r["key"]: {c: r[c] for c in store.value_columns}
            for r in latest_state(spark, settings, store).collect()}
    result.wrong_keys = sorted(k for k in want.keys() | have.keys() if want.get(k) != have.get(k))[:20]
    result.live_keys = len(have)
    result.produced = len(feed.produced)
    changelog = spark.read.format("delta").load(table)
    result.duplicates = changelog.groupBy(EPOCH, BATCH_ID, "key").count().where("count > 1").count()
    result.audited = records_audited(spark, settings, store)
    result.seconds = time.monotonic() - began
    return result, feed.produced


def fold_reference(store, records: list[KV]) -> dict[str, dict]:
    """The store's state from its definition, folded in Python in production order (one producer,
    and a key lives in one partition, so production order is each key's offset order)."""
    state: dict[str, dict] = {}
    for key, value in records:
        k = key.decode()
        if value is None:
            state.pop(k, None)
            continue
        ev = json.loads(value)
        held = state.get(k)
        for agg in store.aggregations:
            x = 1 if agg.op == "count" else ev[agg.source_field]
            if held is None:
                state.setdefault(k, {})[agg.target] = x
            else:
                old = held[agg.target]
                held[agg.target] = {"count": old + 1, "sum": old + x, "min": min(old, x), "max": max(old, x),
                                    "last": x}[agg.op]
    return state
