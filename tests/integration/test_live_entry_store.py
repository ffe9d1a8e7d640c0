"""io.deltastate.LiveEntryStore through the real Spark session and its RocksDB state store: a batch
writes at version = its batch id and reads at the version its predecessor committed; a replayed batch
writes the same version again and changes nothing; an older version stays readable; a new run id
(a restarted process) reads the committed versions from the checkpoint folder; a sweep removes what
retention no longer holds. Then the engine's window and session stores through lost state writes and
lost live entries, against the reference."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from pyspark.sql import DataFrame

pytestmark = pytest.mark.integration
COLUMNS = "key string, window_start long, window_end long, is_delete boolean, count long, total double"
PARTITIONS = 4


def _write(spark, folder: str, run: str, batch: int, rows: list[tuple], sweep: int = 0, horizon: int = 0) -> int:
    df = spark.createDataFrame(rows, COLUMNS)
    return spark._jvm.io.deltastate.LiveEntryStore.write(df._jdf, folder, run, batch, PARTITIONS, sweep, horizon)


def _read(spark, folder: str, run: str, version: int, keys: list[str | tuple]) -> set[tuple]:
    """The entries at version of each key asked: a key alone asks for every entry of it, a tuple
    (key, window_start, window_end) for that one entry."""
    values = spark.createDataFrame([], COLUMNS).select("count", "total").schema
    jvalues = spark._jsparkSession.parseDataType(values.json())
    asked = spark.createDataFrame([k if isinstance(k, tuple) else (k, None, None) for k in keys],
                                  "key string, window_start long, window_end long")
    found = spark._jvm.io.deltastate.LiveEntryStore.read(asked._jdf, jvalues, folder, run, version, PARTITIONS)
    rows = [tuple(r) for r in DataFrame(found, spark).collect()]
    assert len(rows) == len(set(rows)), f"an entry returned twice: {sorted(rows)}"
    return set(rows)


def test_versions_follow_batches_and_a_replay_changes_nothing(spark, tmp_path):
    folder, run = str(tmp_path / "live"), str(uuid.uuid4())
    first = [("a", 0, 5, False, 1, 2.0), ("a", 5, 10, False, 3, 4.0), ("b", 0, 5, False, 7, 1.5)]
    second = [("a", 0, 5, True, None, None), ("b", 0, 5, False, 8, 3.0)]
    after_first = {r[:3] + r[4:] for r in first}
    after_second = {("a", 5, 10, 3, 4.0), ("b", 0, 5, 8, 3.0)}

    assert _write(spark, folder, run, 0, first) == 3
    assert _read(spark, folder, run, 1, ["a", "b", "c"]) == after_first
    assert _write(spark, folder, run, 1, second) == 2
    assert _read(spark, folder, run, 2, ["a", "b"]) == after_second
    assert _write(spark, folder, run, 1, second) == 2  # the replay of batch 1
    assert _read(spark, folder, run, 2, ["a", "b"]) == after_second
    assert _read(spark, folder, run, 1, ["a", "b"]) == after_first
    assert _read(spark, folder, str(uuid.uuid4()), 2, ["a", "b"]) == after_second
    assert _read(spark, folder, run, 2, ["b"]) == {("b", 0, 5, 8, 3.0)}


def test_a_read_looks_up_the_windows_asked_or_every_window_of_a_key(spark, tmp_path):
    """An entry asked by its bounds is that entry alone (none when absent); a key asked with null
    bounds is every entry of it, whatever windows of it are asked too; an entry asked twice, or by
    its bounds and its key, comes back once."""
    folder, run = str(tmp_path / "live"), str(uuid.uuid4())
    keys = [chr(ord("a") + i) for i in range(8)]  # spread over the 4 partitions
    rows = [(k, s, s + 5, False, s, float(i)) for i, k in enumerate(keys) for s in (0, 1, 2, 3)]
    _write(spark, folder, run, 0, rows)
    entry = {r[:3]: r[:3] + r[4:] for r in rows}
    asked = [("a", 1, 6), ("a", 1, 6), ("b", 3, 8), ("c", 9, 14), ("d", 2, 6)]
    assert _read(spark, folder, run, 1, asked) == {entry[("a", 1, 6)], entry[("b", 3, 8)]}
    whole = _read(spark, folder, run, 1, [("e", 0, 5), "e", ("e", 2, 7), "f", ("g", 3, 8)])
    assert whole == {entry[e] for e in entry if e[0] in "ef"} | {entry[("g", 3, 8)]}

def test_a_write_through_applies_the_rows_its_consumer_reads_and_hands_on_the_rest(spark, tmp_path):
    """writeThrough: the job that reads the returned columns writes the state version; a consumer
    that reads them again (a retried job, a replay) writes the same version again."""
    folder, run = str(tmp_path / "live"), str(uuid.uuid4())
    _write(spark, folder, run, 0, [("a", 0, 5, False, 1, 2.0), ("b", 0, 5, False, 7, 1.5)])
    changes = [("a", 0, 5, True, None, None, "x1", 10), ("c", 5, 10, False, 4, 0.5, "x2", 11)]
    df = spark.createDataFrame(changes, f"{COLUMNS}, tag string, n long")
    through = DataFrame(spark._jvm.io.deltastate.LiveEntryStore.writeThrough(df._jdf, 2, folder, run, 1, PARTITIONS, 0, 0),
                        spark)
    assert through.columns == ["tag", "n"]
    assert not list(Path(folder).rglob("2.changelog"))  # version 2 is written by the job that reads them
    assert sorted(tuple(r) for r in through.collect()) == [("x1", 10), ("x2", 11)]
    after = {("b", 0, 5, 7, 1.5), ("c", 5, 10, 4, 0.5)}
    assert _read(spark, folder, run, 2, ["a", "b", "c"]) == after
    assert through.count() == 2  # read again: version 2 written again from version 1
    assert _read(spark, folder, run, 2, ["a", "b", "c"]) == after
    assert _read(spark, folder, run, 1, ["a", "b", "c"]) == {("a", 0, 5, 1, 2.0), ("b", 0, 5, 7, 1.5)}


@pytest.mark.parametrize("column,horizon", [(1, 5), (2, 10), (1, 0), (2, 4)])
def test_a_sweep_removes_the_entries_at_or_below_the_horizon_in_every_partition(spark, tmp_path, column, horizon):
    """Sweep column 1 compares window_start, 2 window_end; keys of every partition are swept, also
    partitions the batch's changes do not reach."""
    folder, run = str(tmp_path / "live"), str(uuid.uuid4())
    keys = [chr(ord("a") + i) for i in range(12)]  # spread over the 4 partitions
    rows = [(k, s, s + 5, False, 1, 1.0) for k in keys for s in (0, 5, 10)]
    _write(spark, folder, run, 0, rows)
    assert _write(spark, folder, run, 1, [("a", 20, 25, False, 2, 2.0)], column, horizon) == 1
    after = _read(spark, folder, run, 2, keys)
    everything = {(k, s, s + 5) for k in keys for s in (0, 5, 10)} | {("a", 20, 25)}
    want = {e for e in everything if e[column] > horizon}
    assert {r[:3] for r in after} == want

@pytest.mark.parametrize("store,seed", [("trade_stats", 41), ("user_sessions", 42)])
def test_a_batch_killed_between_its_state_write_and_its_commit_is_replayed_once(store, seed, broker, spark,
                                                                              make_settings, topic, monkeypatch):
    """A seeded store's batch writes its changelog files and its state in one job, then commits: a
    failure in between leaves the state's next version written and the changelog without the batch.
    The next run replays the batch from the version before: the changelog and the audit hold it
    once, and the snapshot equals the reference."""
    from support.reference import ReferenceTopic
    from support.reference_windowed import SPECS, run
    from support.windowed import assert_state_equal, audit_totals, snapshot_rows, workload

    from deltastate.changelog.batch_commit import BatchCommitter
    from deltastate.engine import run_store
    from deltastate.ingest.partitioner import partition_for
    from deltastate.ingest.producer import ensure_topic, produce_records
    from deltastate.snapshot import publish_snapshot
    from deltastate.stores import load_store

    settings = make_settings()
    assert ensure_topic(broker, topic, PARTITIONS)
    ref = ReferenceTopic(PARTITIONS, partition_for)
    records = workload(store, 1200, seed, 1_700_000_000_000)
    assert produce_records(broker, topic, records).delivered == len(records)
    ref.append(records)
    real_commit, staged_batches = BatchCommitter.commit_staged, []

    def killed_at_batch_2(self, staged, audit):
        staged_batches.append(staged.batch_id)
        if staged.batch_id == 2:  # batch 0 seeds the state, batch 1 is the first written through
            raise RuntimeError("killed between the state write and the commit")
        return real_commit(self, staged, audit)

    with monkeypatch.context() as patched:
        patched.setattr(BatchCommitter, "commit_staged", killed_at_batch_2)
        with pytest.raises(Exception, match="killed between"):
            run_store(settings, store, once=True, topic=topic, max_offsets_per_trigger=310)
    assert staged_batches == [1, 2]
    changelog = spark.read.format("delta").load(settings.table_path(store, "changelog"))
    assert {r["batch_id"] for r in changelog.select("batch_id").distinct().collect()} == {0, 1}

    result = run_store(settings, store, once=True, topic=topic, max_offsets_per_trigger=310)  # replays batch 2
    assert result.batches >= 2
    changelog = spark.read.format("delta").load(settings.table_path(store, "changelog"))
    assert changelog.groupBy("epoch", "batch_id", "key", "window_start", "window_end").count().where("count > 1").count() == 0
    assert audit_totals(spark, settings, store)["records_in"] == len(records)
    publish_snapshot(spark, settings, [load_store(settings, store)])
    assert_state_equal(snapshot_rows(settings, store), run(SPECS[store], ref.records).state)


def test_a_batch_of_dead_letters_alone_commits_its_audit_and_moves_the_state_on(broker, spark, make_settings,
                                                                                topic):
    """A seeded window store's batch whose every record is dead-lettered: its one job writes no
    changelog file and an unchanged state version, its commit carries its audit; the next batch reads
    that version, and the snapshot equals the reference over the good records."""
    from support.reference import ReferenceTopic
    from support.reference_windowed import SPECS, run
    from support.windowed import assert_state_equal, audit_totals, snapshot_rows, workload

    from deltastate.engine import run_store
    from deltastate.ingest.partitioner import partition_for
    from deltastate.ingest.producer import ensure_topic, produce_records
    from deltastate.snapshot import publish_snapshot
    from deltastate.stores import load_store

    store, settings = "trade_stats", make_settings()
    assert ensure_topic(broker, topic, PARTITIONS)
    first = workload(store, 600, 51, 1_700_000_000_000)
    bad = [(f"bad-{i}".encode(), b"{not json") for i in range(40)]
    later = workload(store, 300, 52, 1_700_000_600_000)
    ref = ReferenceTopic(PARTITIONS, partition_for)
    for part, limit, batches in ((first, 310, 2), (bad, 100, 1), (later, 400, 1)):
        assert produce_records(broker, topic, part).delivered == len(part)
        ref.append(part)
        assert run_store(settings, store, once=True, topic=topic, max_offsets_per_trigger=limit).batches == batches
    changelog = spark.read.format("delta").load(settings.table_path(store, "changelog"))
    assert sorted(r["batch_id"] for r in changelog.select("batch_id").distinct().collect()) == [0, 1, 3]
    totals = audit_totals(spark, settings, store)
    assert (totals["records_in"], totals["dead_lettered"]) == (940, 40 + totals["late"])
    publish_snapshot(spark, settings, [load_store(settings, store)])
    good = [r for r in ref.records if r.value != b"{not json"]
    assert_state_equal(snapshot_rows(settings, store), run(SPECS[store], good).state)


def _drop_newest_version(folder) -> int:
    """Deletes every file of the newest state version in `folder` (all partitions): what a process
    killed before its state write leaves. Returns that version."""
    import re

    pattern = re.compile(r"^\.?(\d+)(_[^.]*)?\.(changelog|zip)(\.crc)?$")
    files = [(int(m.group(1)), f) for f in folder.rglob("*") if f.is_file() and (m := pattern.match(f.name))]
    newest = max(v for v, _ in files)
    for version, f in files:
        if version == newest:
            f.unlink()
    return newest


@pytest.mark.parametrize("store,seed", [("trade_stats", 31), ("user_sessions", 32)])
def test_a_lost_state_write_is_replayed_and_lost_live_entries_are_seeded_again(store, seed, broker, spark,
                                                                                make_settings, topic):
    """Two failures, each followed by a run of several batches, the snapshot equal to the reference
    at the end:
    1. a process killed after a batch's changelog commit, before its state write and checkpoint
       commit (the changelog holds the batch; the state store and the stream's commit log do not):
       the next run replays the batch, the changelog and the audit keep it once;
    2. a checkpoint that lost its live entries (as one written before the state store held them):
       its next batch (batch id > 0) seeds them from the changelog, later batches read them."""
    import json
    import shutil

    from support.reference import ReferenceTopic
    from support.reference_windowed import SPECS, run
    from support.windowed import assert_state_equal, audit_totals, snapshot_rows, workload

    from deltastate.engine import run_store
    from deltastate.engine.common.source import QUERY
    from deltastate.engine.windowed.live_store import FOLDER, MARKER
    from deltastate.ingest.partitioner import partition_for
    from deltastate.ingest.producer import ensure_topic, produce_records
    from deltastate.snapshot import publish_snapshot
    from deltastate.stores import load_store

    settings = make_settings()
    assert ensure_topic(broker, topic, PARTITIONS)
    ref = ReferenceTopic(PARTITIONS, partition_for)
    checkpoint = Path(settings.checkpoint_path(store))
    start = 1_700_000_000_000

    def produce_and_run(n: int, part_seed: int, limit: int, batches: int | None = None) -> int:
        """Produces n records and runs the store over them; `limit` (records per micro-batch) a little
        over n / k gives k batches (Kafka's rate limit floors each partition's share, even when the
        records fit in one batch: one batch needs a limit above n)."""
        nonlocal start
        records = workload(store, n, part_seed, start)
        start = max(json.loads(v)["ts"] for _, v in records if v) + 1
        assert produce_records(broker, topic, records).delivered == len(records)
        ref.append(records)
        result = run_store(settings, store, once=True, topic=topic, max_offsets_per_trigger=limit)
        assert batches is None or result.batches == batches
        return result.records_in

    assert produce_and_run(900, seed, 460, 2) == 900  # two batches: seeded at batch 0, then read
    assert json.loads((checkpoint / MARKER).read_text())["seeded_batch"] == 0

    commits = checkpoint / QUERY / "commits"
    last = max(int(f.name) for f in commits.iterdir() if f.name.isdigit())
    for name in (str(last), f".{last}.crc"):
        (commits / name).unlink()
    assert _drop_newest_version(checkpoint / FOLDER) == last + 1  # seeded at batch 0: batch N commits N + 1
    # The replayed batch's records are read again (the replay, then one batch of the new records);
    # the audit of its first attempt stays the one kept.
    assert produce_and_run(600, seed + 1, 700) >= 600
    dupes = (spark.read.format("delta").load(settings.table_path(store, "changelog"))
             .groupBy("epoch", "batch_id", "key", "window_start", "window_end").count().where("count > 1").count())
    assert dupes == 0
    assert audit_totals(spark, settings, store)["records_in"] == 1500  # each record audited once

    # Live entries lost: with their marker (one store) or without it, the marker then outliving them.
    shutil.rmtree(checkpoint / FOLDER)
    if store == "trade_stats":
        (checkpoint / MARKER).unlink()
    assert produce_and_run(600, seed + 2, 310, 2) == 600  # two batches: seeded, then read
    assert json.loads((checkpoint / MARKER).read_text())["seeded_batch"] > 0
    assert produce_and_run(400, seed + 3, 500, 1) == 400  # a new run reads the seeded entries
    publish_snapshot(spark, settings, [load_store(settings, store)])
    assert_state_equal(snapshot_rows(settings, store), run(SPECS[store], ref.records).state)

