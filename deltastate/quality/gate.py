"""Publish a snapshot only when it passes its checks.

The one publisher (deltastate.snapshot.publish_snapshot) builds the candidate file and hands it to
this gate before promoting it: the changelog suite runs on each rebuilt store's changelog at the
version the candidate pinned, and the snapshot suite on the candidate's table (row count against the
live keys counted straight from that changelog version). Only when every check passes does the
publisher promote the candidate; otherwise the candidate is deleted, the previous snapshot stays
current and QualityGateError carries the report.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from deltastate.config import Settings
from deltastate.errors import SnapshotError
from deltastate.quality.validate import ValidationReport, data_docs_index, validate
from deltastate.report import Report
from deltastate.snapshot.catalog import SnapshotInfo, current_version
from deltastate.snapshot.publish import publish_snapshot
from deltastate.stores import load_store
from deltastate.stores.definition import StoreDefinition

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass(frozen=True)
class GateReport(Report):
    success: bool
    candidate_version: int
    current_version: int | None  # what CURRENT names after the gate: the new version, or the old one
    validations: tuple[ValidationReport, ...] = field(default_factory=tuple)
    row_counts: dict[str, int] = field(default_factory=dict)
    data_docs: str = ""


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


def gated_publish(spark: SparkSession, settings: Settings, stores: list[str] | None = None) -> GateReport:
    """Build, check and (only on success) promote the next snapshot, through the one publisher;
    QualityGateError, with the report, when a check fails."""
    from deltastate.stores import list_stores

    chosen = [load_store(settings, n) for n in (stores if stores is not None else list_stores(settings))]
    docs = str(data_docs_index(settings))
    outcome: dict[str, Any] = {}

    def gate(candidate: SnapshotInfo) -> None:
        reports = check_candidate(spark, settings, chosen, candidate)
        counts = {s.store: s.row_count for s in candidate.stores}
        outcome.update(reports=tuple(reports), counts=counts)
        if not all(r.success for r in reports):
            raise QualityGateError(GateReport(False, candidate.version, current_version(settings),
                                              tuple(reports), counts, docs))

    published = publish_snapshot(spark, settings, chosen if stores is not None else None, check=gate)
    return GateReport(True, published.version, published.version, outcome["reports"], outcome["counts"], docs)
