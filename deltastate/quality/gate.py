"""Publish a snapshot only when it passes its checks.

The snapshot is built by deltastate.snapshot.publish_snapshot into a private staging folder, then
checked there: the changelog suite on each rebuilt store's changelog at the version the snapshot
pinned, and the snapshot suite on its table (row count against the live keys counted straight from
that changelog version). Only when every check passes is the file moved next to the published ones
and CURRENT swapped; otherwise the previous snapshot stays current and QualityGateError carries the
report. The real publish lock is held throughout, so a plain `deltastate snapshot publish` waits.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from deltastate.config import Settings
from deltastate.errors import SnapshotError
from deltastate.quality.validate import ValidationReport, data_docs_index, validate
from deltastate.snapshot.catalog import (
    CURRENT,
    current_version,
    fsync_dir,
    prune,
    read_info,
    read_pointer,
    snapshot_files,
    snapshot_name,
    write_pointer,
)
from deltastate.snapshot.publish import publish_lock, publish_snapshot
from deltastate.stores import load_store
from deltastate.stores.definition import StoreDefinition

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass(frozen=True)
class GateReport:
    success: bool
    candidate_version: int
    current_version: int | None  # what CURRENT names after the gate: the new version, or the old one
    validations: tuple[ValidationReport, ...] = field(default_factory=tuple)
    row_counts: dict[str, int] = field(default_factory=dict)
    data_docs: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"success": self.success, "candidate_version": self.candidate_version,
                "current_version": self.current_version, "row_counts": dict(self.row_counts),
                "data_docs": self.data_docs, "validations": [v.to_dict() for v in self.validations]}


class QualityGateError(SnapshotError):
    def __init__(self, report: GateReport) -> None:
        failed = [f"{v.suite}.{v.store}: " + "; ".join(f"{f.expectation}({f.column}) observed {f.observed}"
                                                        for f in v.failures)
                  for v in report.validations if not v.success]
        super().__init__(f"snapshot {report.candidate_version} not published, snapshot "
                         f"{report.current_version} stays current; failed checks: " + " | ".join(failed))
        self.report = report


def check_candidate(spark: SparkSession, settings: Settings, stores: list[StoreDefinition],
                    candidate) -> list[ValidationReport]:
    """Run the changelog and snapshot suites for each store the candidate snapshot rebuilt."""
    from deltastate.quality.frames import changelog_frame, live_keys, snapshot_frame

    reports = []
    for store in stores:
        info = candidate.store(store.name)
        version = None if info is None else info.changelog_version
        if version is not None:
            reports.append(validate(settings, "changelog", store, changelog_frame(spark, settings, store, version)))
        expected = 0 if version is None else live_keys(spark, settings, store, version)
        reports.append(validate(settings, "snapshot", store, snapshot_frame(candidate.path, store),
                                {"live_keys": expected}))
    return reports


def _stage(settings: Settings, staging: Settings) -> None:
    """Give the staging folder the current snapshot (carried forward by partial publishes) and a
    CURRENT naming the newest published version, so the candidate gets the next version number."""
    staging.snapshots_dir.mkdir(parents=True)
    pointer = read_pointer(settings)
    if pointer is not None:
        shutil.copy2(settings.snapshots_dir / pointer, staging.snapshots_dir / pointer)
        (staging.snapshots_dir / CURRENT).write_text(pointer + "\n")
    newest = max([0, *snapshot_files(settings)])
    if newest > (current_version(settings) or 0):
        # A published file newer than CURRENT (a publish that died after its rename): number past it.
        (staging.snapshots_dir / snapshot_name(newest)).touch()


def gated_publish(spark: SparkSession, settings: Settings, stores: list[str] | None = None) -> GateReport:
    """Build, check and (only on success) publish the next snapshot; QualityGateError otherwise."""
    from deltastate.stores import list_stores

    chosen = [load_store(settings, n) for n in (stores if stores is not None else list_stores(settings))]
    staging_home = settings.home / "staging" / f"publish-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    staging = dataclasses.replace(settings, home=staging_home)  # same storage root: same changelogs
    with publish_lock(settings):
        try:
            _stage(settings, staging)
            built = publish_snapshot(spark, staging, chosen if stores is not None else None)
            candidate = read_info(built.path)
            reports = check_candidate(spark, settings, chosen, candidate)
            counts = {s.store: s.row_count for s in candidate.stores}
            docs = str(data_docs_index(settings))
            if not all(r.success for r in reports):
                raise QualityGateError(GateReport(False, candidate.version, current_version(settings),
                                                  tuple(reports), counts, docs))
            final = settings.snapshots_dir / built.path.name
            if final.exists():
                raise SnapshotError(f"snapshot {final} appeared while {built.path.name} was checked")
            os.replace(built.path, final)
            fsync_dir(settings.snapshots_dir)
            write_pointer(settings, final.name)
            prune(settings, settings.snapshot_keep)
            return GateReport(True, candidate.version, candidate.version, tuple(reports), counts, docs)
        finally:
            shutil.rmtree(staging_home, ignore_errors=True)
