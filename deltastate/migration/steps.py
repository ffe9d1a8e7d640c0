"""The migration steps after the plan: start, status, cutover, rollback, retire.

Each step reads and writes the store's version record (stores/current.py), replaced atomically,
and is safe to run again after a crash: start skips what it finished (the seed's changelog append
is idempotent, a saved resume plan means the seed is in place), cutover re-fences and re-runs the
catch-up, which the new version's checkpoint makes a no-op for what it already processed.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from deltastate import metrics
from deltastate.changelog.intake import audit_position
from deltastate.changelog.layout import CHANGELOG, DEADLETTER, INTAKE
from deltastate.changelog.reader import state_columns
from deltastate.changelog.tables import ensure_tables
from deltastate.config import Settings
from deltastate.engine.common.lineage import load_or_create
from deltastate.engine.common.report import BatchListener, BatchReport
from deltastate.engine.common.resume import ResumePlan, load_plan, save_plan
from deltastate.engine.common.writer_lock import claim_checkpoint
from deltastate.engine.run import run_store
from deltastate.maintenance.restore import SEED_DIR
from deltastate.migration.checks import CheckReport, cutover_checks
from deltastate.migration.plan import MigrationError, check_target, plan_migration, topic_watermarks
from deltastate.migration.seed import committed_state, seed_changelog, seed_stream_times, transformed
from deltastate.report import Report
from deltastate.stores import load_store
from deltastate.stores.backends import backend_of
from deltastate.stores.current import BuildRate, Migration, VersionRecord, read_record, write_record
from deltastate.stores.definition import StoreDefinition
from deltastate.stores.fence import BUILDING, CUT_OVER, CUTOVER, RETIRED, ROLLED_BACK

OLD_WRITER_WAIT_S = 120.0  # how long cutover waits for the old version's stream to stop


@dataclass(frozen=True)
class StepReport(Report):
    store: str
    action: str
    from_version: int
    to_version: int
    phase: str
    details: dict[str, Any] = field(default_factory=dict)


def progress_printer(name: str, to_version: int, say: Callable[[str], None]) -> BatchListener:
    """A listener that reports each micro-batch of the version being built as one line."""

    def hear(report: BatchReport) -> None:
        say(f"[migrate {name} v{to_version}] {report.describe()}")

    return hear


def _now() -> str:
    return datetime.now(UTC).isoformat()


def started_migration(settings: Settings, name: str) -> tuple[VersionRecord, Migration]:
    """The version record and its migration; refused when no migration was started."""
    record = read_record(settings, name)
    if record.migration is None:
        raise MigrationError(f"store {name!r}: no migration was started (`deltastate migrate start {name} --to N`)")
    return record, record.migration


def _pair(settings: Settings, name: str, migration: Migration) -> tuple[StoreDefinition, StoreDefinition]:
    return load_store(settings, name, migration.from_version), load_store(settings, name, migration.to_version)


@metrics.migration_step
def start(spark: SparkSession, settings: Settings, name: str, to_version: int,
          progress: BatchListener | None = None) -> StepReport:
    """Builds version `to_version` beside the live one and runs it once to the topic's end;
    `progress` hears each micro-batch of that run."""
    began = time.monotonic()
    live = load_store(settings, name)
    record = read_record(settings, name)
    migration = record.migration
    again = (migration is not None and migration.to_version == to_version
             and migration.phase in (BUILDING, CUTOVER, ROLLED_BACK))
    if migration is not None and again:
        live = load_store(settings, name, migration.from_version)  # a repeated start: go on building
        target = load_store(settings, name, to_version)
        plan = dict(migration.plan or {})
        migration = replace(migration, from_version=live.value_version, phase=BUILDING,
                            started_at=migration.started_at or _now(), plan=plan)
    else:
        check_target(live, to_version)
        if migration is not None and migration.phase not in (CUT_OVER, RETIRED):
            raise MigrationError(f"store {name!r}: a migration to version {migration.to_version} is in phase "
                                 f"{migration.phase!r}; finish it (cutover) or roll it back first")
        target = load_store(settings, name, to_version)
        plan = plan_migration(spark, settings, live, target).to_dict()
        migration = Migration(live.value_version, to_version, BUILDING, started_at=_now(), plan=plan)
    build = plan["build"]
    write_record(settings, name, replace(record, current=live.value_version, migration=migration))
    planned = time.monotonic()
    ensure_tables(spark, settings, target)
    checkpoint = settings.checkpoint_path(target.storage)
    if build == "seed" and load_plan(checkpoint) is None:
        state, position = committed_state(spark, settings, live)
        offsets = position.next_offsets
        seed = transformed(state, live, target).persist()
        in_state_store = backend_of(target).spark_state
        try:
            seed_changelog(seed, target, settings)
            rows = seed.count()
            if not in_state_store:  # state is read back from the changelog, stream times from the intake
                seed_stream_times(spark, settings, target, position.stream_times)
            lineage = load_or_create(spark, settings, target)  # after the seed: epoch 1
            seed_path = None
            if rows and in_state_store:  # key-value state is loaded into Spark's state store
                seed_path = f"{lineage.checkpoint}/{SEED_DIR}"
                seed.select(*state_columns(target)).write.format("delta").mode("overwrite").save(seed_path)
        finally:
            seed.unpersist()
        save_plan(lineage.checkpoint, ResumePlan(offsets, seed_path))
        migration = replace(migration, seeded_rows=rows, seed_offsets=dict(offsets))
        write_record(settings, name, replace(read_record(settings, name), migration=migration))
    seeded = time.monotonic()
    result = run_store(settings, name, once=True, version=to_version, listener=progress)
    seconds = time.monotonic() - began
    phases = {"plan": planned - began, "seed": seeded - planned, "run": seconds - (seeded - began)}
    records = result.records_in + int(migration.seeded_rows or 0)
    record = read_record(settings, name)
    if records and seconds > 0:  # the rate the next plan's estimate uses
        rates = {**record.rates, build: BuildRate(records, round(seconds, 3))}
        write_record(settings, name, replace(record, rates=rates))
    return StepReport(name, "start", live.value_version, to_version, BUILDING,
                      {"build": build, "seeded_rows": migration.seeded_rows,
                       "records_in": result.records_in, "batches": len(result.progress), "seconds": round(seconds, 2),
                       "phases": {k: round(v, 2) for k, v in phases.items()}})


def _offsets(spark: SparkSession, settings: Settings, store: StoreDefinition,
             seeded: Mapping[int, int] | None) -> dict[int, int]:
    out = {int(p): int(o) for p, o in (seeded or {}).items()}
    for p, o in audit_position(spark, settings, store).next_offsets.items():
        out[p] = max(out.get(p, 0), o)
    return out


@metrics.migration_step
def status(spark: SparkSession, settings: Settings, name: str) -> StepReport:
    """Phase, and per partition the next offset each version processes and the new version's lag."""
    record, migration = started_migration(settings, name)
    old, new = _pair(settings, name, migration)
    old_at = _offsets(spark, settings, old, None)
    new_at = _offsets(spark, settings, new, migration.seed_offsets)
    ends = {p: hi for p, (_lo, hi) in topic_watermarks(settings, old.source.topic).items()}
    partitions = sorted(set(old_at) | set(new_at) | set(ends))
    rows = {str(p): {"old": old_at.get(p), "new": new_at.get(p), "end": ends.get(p),
                     "lag_behind_old": (old_at.get(p, 0) - new_at.get(p, 0)),
                     "lag_behind_topic": (ends.get(p, 0) - new_at.get(p, 0))} for p in partitions}
    return StepReport(name, "status", old.value_version, new.value_version, migration.phase,
                      {"current": record.current, "partitions": rows,
                       "lag": sum(max(0, r["lag_behind_topic"]) for r in rows.values()),
                       "started_at": migration.started_at, "cutover_at": migration.cutover_at,
                       "build": migration.build, "seeded_rows": migration.seeded_rows})


@metrics.migration_step
def cutover(spark: SparkSession, settings: Settings, name: str, *, wait_s: float = OLD_WRITER_WAIT_S,
            progress: BatchListener | None = None) -> StepReport:
    """Stops the old version's stream, lets the new one process the remainder, checks it, switches."""
    record, migration = started_migration(settings, name)
    old, new = _pair(settings, name, migration)
    if migration.phase == CUT_OVER and record.current == new.value_version:
        _publish(spark, settings, name)  # a cutover repeated after a crash between the switch and the publish
        return StepReport(name, "cutover", old.value_version, new.value_version, CUT_OVER,
                          {"checks": migration.checks, "repeated": True})
    if migration.phase not in (BUILDING, CUTOVER):
        raise MigrationError(f"store {name!r}: migration to version {new.value_version} is in phase "
                             f"{migration.phase!r}; cutover follows start")
    migration = replace(migration, phase=CUTOVER)
    write_record(settings, name, replace(record, migration=migration))  # fences the old version's runs
    claim_checkpoint(settings, old.storage, wait_s=wait_s)  # returns once the old stream has stopped
    started = time.monotonic()
    run_store(settings, name, once=True, version=new.value_version, listener=progress)
    report: CheckReport = cutover_checks(spark, settings, old, new)
    if not report.success:
        migration = replace(migration, phase=BUILDING)  # the old version may run again; nothing switched
        write_record(settings, name, replace(read_record(settings, name), migration=migration))
        raise MigrationError(f"store {name!r}: version {new.value_version} failed its cutover checks; version "
                             f"{old.value_version} stays current. {report.summary()}")
    migration = replace(migration, phase=CUT_OVER, cutover_at=_now(), checks=report.to_dict())
    write_record(settings, name, replace(read_record(settings, name), current=new.value_version, migration=migration))
    _publish(spark, settings, name)
    return StepReport(name, "cutover", old.value_version, new.value_version, CUT_OVER,
                      {"checks": report.to_dict(), "seconds": round(time.monotonic() - started, 2)})


@metrics.migration_step
def rollback(spark: SparkSession, settings: Settings, name: str) -> StepReport:
    """Makes the old version current again; its stream resumes from its own checkpoint."""
    record, migration = started_migration(settings, name)
    old, new = _pair(settings, name, migration)
    if migration.phase != CUT_OVER or old.value_version in record.retired:
        raise MigrationError(f"store {name!r}: rollback switches back a cut-over migration whose old version "
                             f"is not retired (phase {migration.phase!r}, retired {list(record.retired)})")
    migration = replace(migration, phase=ROLLED_BACK, rolled_back_at=_now())
    write_record(settings, name, replace(record, current=old.value_version, migration=migration))
    _publish(spark, settings, name)
    return StepReport(name, "rollback", old.value_version, new.value_version, ROLLED_BACK)


@metrics.migration_step
def retire(settings: Settings, name: str, *, hold_s: float | None = None) -> StepReport:
    """Deletes the old version's tables and checkpoint once the hold period since cutover has passed."""
    record, migration = started_migration(settings, name)
    old, new = _pair(settings, name, migration)
    if migration.phase != CUT_OVER or migration.cutover_at is None:
        raise MigrationError(f"store {name!r}: only a cut-over migration's old version can be retired "
                             f"(phase {migration.phase!r})")
    [step] = [s for s in new.history if s.version == new.value_version]
    hold = step.retire_after_ms / 1000 if hold_s is None else hold_s
    since = (datetime.now(UTC) - datetime.fromisoformat(migration.cutover_at)).total_seconds()
    if since < hold:
        raise MigrationError(f"store {name!r}: version {old.value_version} was cut over {since:.0f}s ago; it is "
                             f"kept for {hold:.0f}s (migrations: retire_after, or --hold) so a rollback stays possible")
    claim_checkpoint(settings, old.storage, wait_s=0)
    removed = []
    for path in [*(settings.table_path(old.storage, t) for t in (CHANGELOG, DEADLETTER, INTAKE)),
                 settings.checkpoint_path(old.storage)]:
        local = Path(path.removeprefix("file://"))
        if local.exists():
            shutil.rmtree(local)
            removed.append(str(local))
    migration = replace(migration, phase=RETIRED, retired_at=_now())
    write_record(settings, name, replace(record, migration=migration,
                                         retired=tuple(sorted({*record.retired, old.value_version}))))
    return StepReport(name, "retire", old.value_version, new.value_version, RETIRED, {"removed": removed})


def _publish(spark: SparkSession, settings: Settings, name: str) -> None:
    """The store's snapshot table rebuilt from the version now current; the other stores carried."""
    from deltastate.snapshot.publish import publish_snapshot

    publish_snapshot(spark, settings, [load_store(settings, name)])
