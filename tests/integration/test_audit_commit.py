"""One Delta commit per micro-batch: the changelog records and the batch's audit land together, and the
intake table receives the audits as a copy (real broker, Spark and Delta).

A run whose copy interval outlasts it writes one changelog commit (of one file) per batch and no
intake commit until it stops; the copy then holds every batch's audit exactly once, with the commit's time, and
reconciles with a reference computed from the produced records. Copies repeated, or run by two
threads at once, land once; a run that died before copying has its audits copied by the next start.
"""

import threading
import time
from pathlib import Path

import pytest
from delta.tables import DeltaTable
from support.reference import expected
from support.store_checks import STORE, assert_counts, assert_state, generated, new_topic, produce, published_state

from deltastate.changelog.audit_log import BatchAudit, copied_through, flush_audits
from deltastate.changelog.layout import CHANGELOG, INTAKE
from deltastate.changelog.txn_log import txn_versions
from deltastate.engine import run_store
from deltastate.stores import load_store

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]


def _history(spark, settings, table: str) -> list:
    path = settings.table_path(STORE, table)
    return sorted(DeltaTable.forPath(spark, path).history().collect(), key=lambda r: r["version"])


def _batch_commits(spark, settings) -> dict[int, tuple]:
    """batch id -> (changelog commit time, its audit row), from the commits that carry an audit."""
    out = {}
    for commit in _history(spark, settings, CHANGELOG):
        audit = BatchAudit.from_metadata(commit["userMetadata"])
        if audit is not None:
            assert audit.row["batch_id"] not in out, "a batch's audit rode in two commits"
            out[audit.row["batch_id"]] = (commit["timestamp"], audit.row)
    return out


def test_a_batch_is_one_commit_and_the_intake_holds_its_audit_once(broker: str, spark, make_settings,
                                                                     topic: str) -> None:
    settings = make_settings(audit_flush_seconds=1e9)  # only the run's start and stop copy audits
    ref = new_topic(settings, broker, topic)
    stream = generated(1_500, 200, seed=7, tombstones=0.02)
    produce(settings, topic, stream + [(b"p-bad", b"{not json")], ref)
    result = run_store(settings, STORE, once=True, topic=topic, max_offsets_per_trigger=130)
    assert result.batches >= 10

    commits = _batch_commits(spark, settings)
    assert sorted(commits) == list(range(result.batches))
    # Each batch is one changelog commit (besides the table's creation), and the intake table has
    # its creation and one copy: no per-batch audit commit.
    writes = [c for c in _history(spark, settings, CHANGELOG) if c["operation"] == "WRITE"]
    assert len(writes) == result.batches
    # Each batch is written by the job that runs its stateful plan: one file per shuffle partition
    # that changed a key, and the commit's row count is the batch's changed keys.
    files = [int(c["operationMetrics"]["numFiles"]) for c in writes]
    assert all(1 <= n <= settings.shuffle_partitions for n in files), files
    changed = (spark.read.format("delta").load(settings.table_path(STORE, CHANGELOG))
               .groupBy("batch_id").count().collect())
    rows_by_batch = {r["batch_id"]: r["count"] for r in changed}
    assert [int(c["operationMetrics"]["numOutputRows"]) for c in writes] == [
        rows_by_batch[b] for b in sorted(rows_by_batch)]
    intake_writes = [c for c in _history(spark, settings, INTAKE) if c["operation"] == "WRITE"]
    assert len(intake_writes) == 1
    assert BatchAudit.from_metadata(intake_writes[0]["userMetadata"]) is None  # a copy, not a batch
    # No batch wrote the changelog's Delta checkpoint; the run's end wrote one of its newest version.
    newest = result.batches  # version 0 created the table
    log = Path(settings.table_path(STORE, CHANGELOG)) / "_delta_log"
    assert sorted(p.name for p in log.glob("*.checkpoint*.parquet")) == [f"{newest:020d}.checkpoint.parquet"]

    rows = {r["batch_id"]: r.asDict() for r in
            spark.read.format("delta").load(settings.table_path(STORE, INTAKE)).collect()}
    assert sorted(rows) == sorted(commits)
    for batch_id, (committed_at, audit) in commits.items():
        row = rows[batch_id]
        assert {k: row[k] for k in audit} == audit
        assert row["write_time"] == committed_at  # the copy keeps the time the batch committed
    exp = expected(ref.records, settings.max_value_bytes)
    assert_counts(exp, result, spark, settings)
    assert_state(published_state(spark, settings), exp)


def test_copies_land_once_and_a_dead_run_is_copied_at_the_next_start(broker: str, spark, make_settings,
                                                                      topic: str, monkeypatch) -> None:
    import deltastate.engine.run as engine_run

    settings = make_settings(audit_flush_seconds=1e9)
    store = load_store(settings, STORE)
    intake = settings.table_path(STORE, INTAKE)
    ref = new_topic(settings, broker, topic)
    stream = generated(900, 150, seed=11)
    produce(settings, topic, stream[:600], ref)
    # A run that dies after its commits and before any copy: its start and stop copies do nothing.
    with monkeypatch.context() as patched:
        patched.setattr(engine_run, "flush_audits", lambda *args: 0)
        first = run_store(settings, STORE, once=True, topic=topic, max_offsets_per_trigger=300)
    assert first.batches >= 2
    assert spark.read.format("delta").load(intake).count() == 0

    errors: list[BaseException] = []
    landed: list[int] = []

    def flush() -> None:
        try:
            landed.append(flush_audits(spark, settings, store))
        except BaseException as exc:  # noqa: BLE001 - reported by the assert below
            errors.append(exc)

    threads = [threading.Thread(target=flush) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(landed) == 2
    ids = [r["batch_id"] for r in spark.read.format("delta").load(intake).select("batch_id").collect()]
    assert sorted(ids) == list(range(first.batches))  # two copies at once: each batch once
    assert flush_audits(spark, settings, store) == 0  # nothing left to copy

    produce(settings, topic, stream[600:], ref)
    with monkeypatch.context() as patched:
        patched.setattr(engine_run, "flush_audits", lambda *args: 0)
        second = run_store(settings, STORE, once=True, topic=topic, max_offsets_per_trigger=300)
    assert spark.read.format("delta").load(intake).count() == first.batches
    run_store(settings, STORE, once=True, topic=topic)  # nothing new to read: its start copies
    ids = [r["batch_id"] for r in spark.read.format("delta").load(intake).select("batch_id").collect()]
    assert sorted(ids) == sorted(_batch_commits(spark, settings))
    assert len(ids) == first.batches + second.batches
    exp = expected(ref.records, settings.max_value_bytes)
    assert_counts(exp, None, spark, settings)
    assert_state(published_state(spark, settings), exp)


def test_a_runs_own_copies_are_plain_and_the_next_start_settles_their_txn_version(
        broker: str, spark, make_settings, topic: str, monkeypatch) -> None:
    import deltastate.engine.run as engine_run

    settings = make_settings(audit_flush_seconds=0)  # the run's thread copies at every check
    intake = settings.table_path(STORE, INTAKE)
    ref = new_topic(settings, broker, topic)
    stream = generated(900, 150, seed=13, tombstones=0.02)
    produce(settings, topic, stream[:600], ref)
    # A continuous run that dies after its own copies, before the stop's flush.
    reports, stop = [], threading.Event()
    with monkeypatch.context() as patched:
        patched.setattr(engine_run, "flush_audits", lambda *args: 0)
        runner = threading.Thread(target=run_store, args=(settings, STORE), daemon=True,
                                  kwargs={"once": False, "trigger": "1 second", "topic": topic, "stop_event": stop,
                                          "listener": reports.append})
        runner.start()
        deadline = time.monotonic() + 180
        while (sum(r.records_in for r in reports) < 600 or copied_through(spark, intake) < len(reports)) \
                and time.monotonic() < deadline:
            time.sleep(0.3)
        stop.set()
        runner.join(120)
    assert sum(r.records_in for r in reports) == 600 and len(reports) >= 1
    batches = sorted(_batch_commits(spark, settings))
    ids = [r["batch_id"] for r in spark.read.format("delta").load(intake).select("batch_id").collect()]
    assert sorted(ids) == batches  # every batch copied once, by the run's plain copies
    assert txn_versions(spark, intake) == {}  # a plain append records no txn version
    [app_id] = {BatchAudit.from_metadata(c["userMetadata"]).app_id for c in _history(spark, settings, CHANGELOG)
                if BatchAudit.from_metadata(c["userMetadata"]) is not None}
    # The next flush (a run's start, restore) has nothing to copy, and settles the txn version.
    assert flush_audits(spark, settings, load_store(settings, STORE)) == 0
    assert txn_versions(spark, intake) == {app_id: batches[-1]}

    produce(settings, topic, stream[600:], ref)
    result = run_store(settings, STORE, once=True, topic=topic)
    assert txn_versions(spark, intake) == {app_id: max(_batch_commits(spark, settings))}
    ids = [r["batch_id"] for r in spark.read.format("delta").load(intake).select("batch_id").collect()]
    assert sorted(ids) == sorted(_batch_commits(spark, settings)) and result.batches >= 1
    exp = expected(ref.records, settings.max_value_bytes)
    assert_counts(exp, None, spark, settings)
    assert_state(published_state(spark, settings), exp)


def test_a_replayed_batch_finds_its_dead_letters_and_appends_them_once(broker: str, spark, make_settings,
                                                                         topic: str, monkeypatch) -> None:
    from deltastate.changelog.batch_commit import BatchCommitter

    settings = make_settings(audit_flush_seconds=1e9)
    dead_path = settings.table_path(STORE, "deadletter")
    ref = new_topic(settings, broker, topic)
    stream = generated(900, 150, seed=17)
    for i in range(0, len(stream), 30):  # a bad record in every stretch of 30, so in every batch
        stream.insert(i, (f"p-bad-{i}".encode(), b"{not json"))
    produce(settings, topic, stream, ref)
    real_commit = BatchCommitter.commit_staged

    def crash_before_commit(self, staged, audit):
        if staged.batch_id == 1:  # its files and dead letters are written; a crash takes the commit
            raise RuntimeError("killed between the dead letters and the commit")
        return real_commit(self, staged, audit)

    with monkeypatch.context() as patched:
        # Batch 1 is not the run's first: its files are written by its one job, then committed.
        patched.setattr(BatchCommitter, "commit_staged", crash_before_commit)
        with pytest.raises(Exception, match="killed between"):
            run_store(settings, STORE, once=True, topic=topic, max_offsets_per_trigger=300)
    landed = spark.read.format("delta").load(dead_path).groupBy("batch_id").count().collect()
    assert {r["batch_id"] for r in landed} == {0, 1}, "batch 1's dead letters landed before the failed commit"

    result = run_store(settings, STORE, once=True, topic=topic, max_offsets_per_trigger=300)  # replays batch 1
    assert result.batches >= 2
    exp = expected(ref.records, settings.max_value_bytes)
    dead = spark.read.format("delta").load(dead_path)
    assert dead.count() == exp.dead_lettered >= 30
    assert dead.select("partition", "offset").distinct().count() == exp.dead_lettered
    assert_counts(exp, None, spark, settings)
    assert_state(published_state(spark, settings), exp)


def test_a_copy_covers_the_changelog_only_through_the_audits_it_took(spark, make_settings) -> None:
    """A batch's commit lands inside save() and its audit joins the run's pending list after: a copy
    taken in between must not mark that commit copied, or its audit is never copied."""
    from deltastate.changelog.audit_log import audit_record
    from deltastate.changelog.batch_commit import BatchCommitter
    from deltastate.changelog.layout import changelog_columns, ddl
    from deltastate.changelog.tables import ensure_tables

    settings = make_settings(audit_flush_seconds=1e9)
    store = load_store(settings, STORE)
    ensure_tables(spark, settings, store)
    changelog, intake = settings.table_path(STORE, CHANGELOG), settings.table_path(STORE, INTAKE)
    lineage, app = "race-lineage", f"deltastate/{STORE}/intake/race"
    committer = BatchCommitter(settings, store, f"deltastate/{STORE}/changelog/race")
    columns = changelog_columns(store)
    a_row = spark.createDataFrame([tuple(None for _ in columns)], ddl(columns))  # one row: an empty append commits nothing

    def audit(batch: int) -> BatchAudit:
        return BatchAudit(app, audit_record(lineage, batch, {0: (10, 10, 0, 0)}, {0: (batch * 10, batch * 10 + 9)},
                                            {}, "{}"))

    committer.commit(a_row, 0, audit(0))
    committer.commit(a_row, 1, audit(1))
    taken_through = _history(spark, settings, CHANGELOG)[-1]["version"]
    # Batch 2's commit lands; the copy runs before its audit reaches the pending list.
    a_row.write.format("delta").mode("append").option("userMetadata", audit(2).metadata()).save(changelog)
    committer.copy(spark)
    assert copied_through(spark, intake) == taken_through
    assert flush_audits(spark, settings, store) == 1  # the next flush finds batch 2's audit
    ids = sorted(r["batch_id"] for r in spark.read.format("delta").load(intake).select("batch_id").collect())
    assert ids == [0, 1, 2]
