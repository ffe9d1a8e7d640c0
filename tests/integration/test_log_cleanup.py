"""A store's Delta logs are cleaned past their log retention, never of a commit a reader needs (real
Spark, Delta, broker and DuckDB snapshots).

Commit files are aged by setting their modification times (what Delta's cleanup compares with its
cutoff) to two hours ago or earlier, two minutes apart in version order; the expected first kept version is
computed in the test from Delta's documented rule: a checkpoint stays from which every retained
version reads, so the log keeps everything from the newest checkpoint at or before the first commit
that must stay.
"""

import json
import os
import re
import time
from pathlib import Path

import pytest
from support.reference import VALUE_FIELDS, expected
from support.store_checks import STORE, assert_state, generated, new_topic, produce, published_state

from deltastate.changelog.checkpoints import INTERVAL_PROPERTY, NO_COMMIT_CHECKPOINTS, checkpoint_if_due
from deltastate.changelog.layout import CHANGELOG, INTAKE
from deltastate.changelog.log_cleanup import (
    DEFAULT_RETENTION,
    RETENTION_PROPERTY,
    SELF_CLEANUP_PROPERTY,
    clean_log,
    log_properties,
)
from deltastate.changelog.log_state import read_log_state
from deltastate.changelog.tables import ensure_tables
from deltastate.engine import run_store
from deltastate.maintenance.log_retention import kept_versions, maintain_logs, retention_ms
from deltastate.query.consistency import ConsistentReads
from deltastate.query.reads import Queries
from deltastate.snapshot.publish import publish_snapshot
from deltastate.stores import load_store

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

_VERSIONED = re.compile(r"^\.?(\d{20})\.")
AGE_S = 2 * 3600  # past DEFAULT_RETENTION (an hour)
HOUR_MS = 3_600_000
SPACING_S = 120


def _append(spark, path: str, first: int) -> None:
    spark.range(first, first + 3).write.format("delta").mode("append").save(path)


def _new_table(spark, path: str, commits: int, checkpoints_after: set[int]) -> list[int]:
    """A table with the changelog's log properties and `commits` appends of ids 10v..10v+2; a
    checkpoint after each version in checkpoints_after. Returns every id written."""
    _append(spark, path, 0)
    props = {INTERVAL_PROPERTY: NO_COMMIT_CHECKPOINTS, **log_properties()}
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ("
              + ", ".join(f"'{k}' = '{v}'" for k, v in props.items()) + ")")
    ids = [0, 1, 2]
    for version in range(2, commits):
        _append(spark, path, version * 10)
        ids += [version * 10, version * 10 + 1, version * 10 + 2]
        if version in checkpoints_after:
            assert checkpoint_if_due(spark, path, every=1) == version
    return ids


def _age(path: str, through: int) -> None:
    """Commit, checksum and checkpoint files of versions 0..through, Hadoop's sidecars included,
    modified AGE_S ago or earlier, SPACING_S apart in version order (more than the cleanup's
    minute of slack before a kept commit, so that slack keeps no older version)."""
    base = time.time() - AGE_S - through * SPACING_S
    for f in (Path(path) / "_delta_log").iterdir():
        m = _VERSIONED.match(f.name)
        if m and int(m.group(1)) <= through:
            at = base + int(m.group(1)) * SPACING_S
            os.utime(f, (at, at))


def _log_versions(path: str) -> list[int]:
    return sorted(int(f.name[:20]) for f in (Path(path) / "_delta_log").glob("*.json"))


def _expected_first_kept(checkpoints: set[int], must_stay_from: int) -> int:
    return max((c for c in checkpoints if c <= must_stay_from), default=0)


def _ids(spark, path: str, version: int | None = None) -> list[int]:
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    return sorted(r["id"] for r in reader.load(path).collect())


def test_commits_past_retention_leave_and_every_kept_version_still_reads(spark, tmp_path: Path) -> None:
    path = str(tmp_path / "table")
    checkpoints = {10, 20, 29}
    ids = _new_table(spark, path, 30, checkpoints)
    as_of_22 = _ids(spark, path, 22)
    _age(path, through=24)  # 25..29 stay inside the retention
    clean_log(spark, path, HOUR_MS)

    first = _expected_first_kept(checkpoints, 25)
    assert first == 20
    assert _log_versions(path) == list(range(first, 30))
    log = Path(path) / "_delta_log"
    leftovers = [f.name for f in log.iterdir() if (m := _VERSIONED.match(f.name)) and int(m.group(1)) < first]
    assert leftovers == [], "files of deleted versions stayed (checksums, Hadoop sidecars, old checkpoints)"
    assert _ids(spark, path) == sorted(ids)
    assert _ids(spark, path, 22) == as_of_22  # time travel inside the kept log
    with pytest.raises(Exception, match="(?i)version|log|checkpoint"):
        _ids(spark, path, 5)
    assert len(read_log_state(path, with_files=True).files) == len(spark.read.format("delta").load(path).inputFiles())
    _append(spark, path, 900)  # the table still takes commits
    assert _ids(spark, path) == sorted([*ids, 900, 901, 902])


def test_a_cleanup_keeps_every_commit_from_the_first_a_reader_needs(spark, tmp_path: Path) -> None:
    path = str(tmp_path / "table")
    checkpoints = {10, 20, 29}
    _new_table(spark, path, 30, checkpoints)
    _age(path, through=29)  # everything past the retention
    clean_log(spark, path, HOUR_MS, keep_from=15)
    assert _log_versions(path) == list(range(_expected_first_kept(checkpoints, 15), 30))
    clean_log(spark, path, HOUR_MS, keep_from=27)
    assert _log_versions(path) == list(range(_expected_first_kept(checkpoints, 27), 30))


def test_a_longer_retention_set_on_the_table_is_kept_and_followed(spark, make_settings) -> None:
    settings = make_settings()
    store = load_store(settings, "player_stats")
    ensure_tables(spark, settings, store)
    changelog, intake = (settings.table_path(store.storage, t) for t in (CHANGELOG, INTAKE))
    for path in (changelog, intake):
        conf = read_log_state(path).configuration
        assert (conf[RETENTION_PROPERTY], conf[SELF_CLEANUP_PROPERTY]) == (DEFAULT_RETENTION, "false")
    # As tables created before these properties existed: both get them at the next start.
    for path in (changelog, intake):
        spark.sql(f"ALTER TABLE delta.`{path}` UNSET TBLPROPERTIES ('{RETENTION_PROPERTY}', '{SELF_CLEANUP_PROPERTY}')")
    ensure_tables(spark, settings, store)
    for path in (changelog, intake):
        conf = read_log_state(path).configuration
        assert (conf[RETENTION_PROPERTY], conf[SELF_CLEANUP_PROPERTY]) == (DEFAULT_RETENTION, "false")
    # A user's own retention stays, and the cleanup follows it.
    spark.sql(f"ALTER TABLE delta.`{changelog}` SET TBLPROPERTIES ('{RETENTION_PROPERTY}' = 'interval 3 hours')")
    ensure_tables(spark, settings, store)
    assert read_log_state(changelog).configuration[RETENTION_PROPERTY] == "interval 3 hours"
    for i in range(4):  # more commits, so the checkpoint below is past several
        spark.sql(f"ALTER TABLE delta.`{changelog}` SET TBLPROPERTIES ('deltastate.test.commit' = '{i}')")
    newest = _log_versions(changelog)[-1]
    assert newest >= 6 and checkpoint_if_due(spark, changelog, every=1) == newest
    _age(changelog, through=newest)
    assert retention_ms(spark, intake) == HOUR_MS  # DEFAULT_RETENTION
    assert retention_ms(spark, changelog) == 3 * HOUR_MS
    clean_log(spark, changelog, retention_ms(spark, changelog))
    assert _log_versions(changelog)[0] == 0, "commits two hours old left a table that keeps three"


def test_a_running_store_keeps_uncopied_audits_and_what_fresh_reads_follow(broker: str, spark, make_settings,
                                                                          topic: str) -> None:
    settings = make_settings(audit_flush_seconds=1e9)  # audits are copied when a run stops
    store = load_store(settings, STORE)
    ref = new_topic(settings, broker, topic)
    first = generated(1_200, 150, seed=11)
    produce(settings, topic, first, ref)
    assert run_store(settings, STORE, once=True, topic=topic, max_offsets_per_trigger=100).batches >= 10
    state = published_state(spark, settings)
    assert_state(state, expected(ref.records))
    changelog, intake = (settings.table_path(store.storage, t) for t in (CHANGELOG, INTAKE))
    at_publish = _log_versions(changelog)[-1]

    second = generated(900, 150, seed=12)
    produce(settings, topic, second, ref)
    run_store(settings, STORE, once=True, topic=topic, max_offsets_per_trigger=100)
    newest = _log_versions(changelog)[-1]
    assert newest - at_publish >= 9
    kept = kept_versions(spark, settings, store)
    assert kept.changelog == at_publish  # every audit copied at the run's stop; the snapshot holds an older version

    # A short-lived intake has no checkpoint of Delta's own yet (one every ten commits): give it one.
    intake_newest = _log_versions(intake)[-1]
    assert checkpoint_if_due(spark, intake, every=1) == intake_newest
    for path in (changelog, intake):
        _age(path, through=_log_versions(path)[-1])
    checkpoints = {int(f.name[:20]) for f in (Path(changelog) / "_delta_log").glob("*.checkpoint.parquet")}
    maintain_logs(spark, settings, store, clean_now=True)
    assert _log_versions(changelog) == list(range(_expected_first_kept(checkpoints, at_publish), newest + 1))
    assert _log_versions(changelog)[0] > 0, "nothing was cleaned"
    assert _log_versions(intake) == [intake_newest], "a key-value store's intake keeps what its retention keeps"

    # Fresh reads follow the commits after the snapshot from the log, and see every result.
    reference = expected(ref.records)
    reads = ConsistentReads(settings)
    try:
        with Queries(settings) as queries, reads.reading(queries, queries.reader.snapshot, [STORE], "committed",
                                                         None) as pinned:
            assert pinned.fresh_to == newest
            rows = pinned.queries.all(STORE).rows
    finally:
        reads.close()
    assert_state({r["key"]: {f: r[f] for f in VALUE_FIELDS} for r in rows}, reference)
    assert_state(published_state(spark, settings), reference)


def test_a_window_store_keeps_the_intake_commits_its_snapshot_horizon_follows(spark, make_settings) -> None:
    settings = make_settings()
    store = load_store(settings, "trade_stats")
    ensure_tables(spark, settings, store)
    intake = settings.table_path(store.storage, INTAKE)
    for batch in range(6):
        _audit_commit(spark, intake, batch)
    info = publish_snapshot(spark, settings, [store])
    held = info.store(store.name).intake_version
    assert held == _log_versions(intake)[-1]
    for batch in range(6, 30):
        _audit_commit(spark, intake, batch)
    newest = _log_versions(intake)[-1]
    assert not list((Path(intake) / "_delta_log").glob("*.checkpoint.parquet")), \
        "an intake commit wrote a checkpoint: its writers checkpoint it beside the stream"
    assert checkpoint_if_due(spark, intake) == newest
    checkpoints = {int(f.name[:20]) for f in (Path(intake) / "_delta_log").glob("*.checkpoint.parquet")}
    _age(intake, through=newest)
    assert kept_versions(spark, settings, store).intake == held
    maintain_logs(spark, settings, store, clean_now=True)
    assert _log_versions(intake) == list(range(_expected_first_kept(checkpoints, held), newest + 1))


def _audit_commit(spark, intake: str, batch: int) -> None:
    """One intake commit with one audit row whose stream time advances with the batch."""
    from datetime import UTC, datetime

    from deltastate.changelog.layout import INTAKE_COLUMNS, ddl

    at = datetime(2026, 1, 1, tzinfo=UTC)
    row = ("test-engine", batch, 1, 1, 0, 0, "{}", 0, json.dumps({"0": batch * 1_000}), at, None, None)
    spark.createDataFrame([row], ddl(INTAKE_COLUMNS)).write.format("delta").mode("append").save(intake)
