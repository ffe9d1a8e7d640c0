"""The publish gate through the real broker, Spark, Delta, great-expectations and DuckDB: a clean
changelog is published and matches the independent reference; a changelog that breaks one
expectation blocks the publish, the previous snapshot stays current and the error carries the report."""

from __future__ import annotations

import pytest
from support.reference import VALUE_FIELDS, expected
from support.store_checks import STORE, generated, new_topic, produce

from deltastate.engine import run_store
from deltastate.quality.gate import QualityGateError, gated_publish
from deltastate.quality.validate import data_docs_index
from deltastate.query import Queries
from deltastate.snapshot.catalog import current_version, read_info, read_pointer, snapshot_files, snapshot_name

pytestmark = pytest.mark.integration


def _published(settings) -> dict[str, dict[str, int]]:
    with Queries(settings) as queries:
        rows = queries.all(STORE).rows
    return {row["key"]: {f: row[f] for f in VALUE_FIELDS} for row in rows}


def test_gate_publishes_a_clean_snapshot_and_blocks_a_failing_one(make_settings, broker, spark, topic):
    settings = make_settings("gate")
    ref = new_topic(settings, broker, topic)
    produce(settings, topic, generated(3_000, 200, seed=23, tombstones=0.05), ref)
    run_store(settings, STORE, once=True, topic=topic)
    exp = expected(ref.records, settings.max_value_bytes)
    assert exp.tombstones > 0  # deletes in the changelog: live keys < keys ever seen

    report = gated_publish(spark, settings, [STORE])
    assert report.success and report.current_version == report.candidate_version == current_version(settings)
    assert {(v.suite, v.store, v.success) for v in report.validations} == {
        ("changelog", STORE, True), ("snapshot", STORE, True)}
    assert report.row_counts[STORE] == len(exp.state)
    # The file promoted is the candidate the gate checked: same version, same per-store metadata.
    promoted = read_info(settings.snapshots_dir / snapshot_name(report.candidate_version))
    assert {s.store: s.row_count for s in promoted.stores} == report.row_counts
    assert _published(settings) == exp.state
    assert data_docs_index(settings).is_file()
    good_pointer, good_files = read_pointer(settings), set(snapshot_files(settings))
    good_folder = sorted(p.name for p in settings.snapshots_dir.iterdir())

    # One changelog record with an op that is neither put nor delete, appended like a buggy writer would.
    path = settings.table_path(STORE, "changelog")
    bad = spark.read.format("delta").load(path).where("op = 'put'").limit(1)
    bad.selectExpr("'upsert' AS op", *[f"`{c}`" for c in bad.columns if c != "op"]).select(*bad.columns) \
        .write.format("delta").mode("append").save(path)

    with pytest.raises(QualityGateError) as caught:
        gated_publish(spark, settings, [STORE])
    blocked = caught.value.report
    assert not blocked.success and blocked.current_version == current_version(settings)
    [failed] = [v for v in blocked.validations if not v.success]
    assert (failed.suite, failed.store) == ("changelog", STORE)
    assert [(f.expectation, f.column) for f in failed.failures] == [("expect_column_values_to_be_in_set", "op")]
    assert "upsert" in str(failed.failures[0].observed) and "upsert" in str(caught.value)
    # The previous snapshot is still the current one, unchanged; the candidate left no file behind.
    assert read_pointer(settings) == good_pointer and set(snapshot_files(settings)) == good_files
    assert _published(settings) == exp.state
    assert sorted(p.name for p in settings.snapshots_dir.iterdir()) == good_folder
    # A gate that passes again promotes the next version number: the refused candidate used none up.
    spark.sql(f"DELETE FROM delta.`{path}` WHERE op = 'upsert'")
    again = gated_publish(spark, settings, [STORE])
    assert again.success and again.candidate_version == report.candidate_version + 1
