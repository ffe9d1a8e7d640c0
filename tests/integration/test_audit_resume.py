"""A key-value run starts from its lineage's newest audit row, not from the whole audit history
(real broker, Spark and Delta; the store contract suite checks every store type more briefly).

Each audit row carries what its writer started the batch from (totals_before). A run's first batch
(or a replay) reads the row of the batch the Delta log names as the lineage's newest, so its start
costs one row however long the store has run. Checked against the full-history scan, against a
reference computed from the produced records, and with every older audit row's file moved away.
"""

from pathlib import Path

import pytest
from support.reference import expected
from support.store_checks import (
    STORE,
    assert_counts,
    assert_state,
    generated,
    ledger_fields,
    move_older_audit_files,
    new_topic,
    newest_audited_batch,
    produce,
    published_state,
    restore_files,
)

from deltastate.changelog.layout import INTAKE
from deltastate.changelog.txn_log import TXN_RETENTION
from deltastate.engine import run_store
from deltastate.engine.common.lineage import load_or_create
from deltastate.engine.keyvalue.audit import load_ledger, scan_ledger
from deltastate.stores import load_store

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1200)]


def _same(a, b) -> bool:
    return ledger_fields(a) == ledger_fields(b)


def test_a_key_value_run_starts_from_the_newest_audit_row(broker: str, spark, make_settings, topic: str,
                                                          tmp_path: Path) -> None:
    settings = make_settings()
    store = load_store(settings, STORE)
    ref = new_topic(settings, broker, topic)
    stream = generated(2_000, 300, seed=61, tombstones=0.03)
    bad = [(b"p-bad", b"{not json"), (b"p-bad", b'{"player_id": "p-bad", "game_id": "g", "score": -1, "ts": 1}')]
    produce(settings, topic, stream[:1_200] + bad, ref)
    run_store(settings, STORE, once=True, topic=topic, max_offsets_per_trigger=700)
    produce(settings, topic, stream[1_200:1_700], ref)
    run_store(settings, STORE, once=True, topic=topic, max_offsets_per_trigger=700)

    lineage = load_or_create(spark, settings, store)
    newest = newest_audited_batch(spark, settings, STORE)
    assert newest >= 2  # several batches, over two runs
    after = load_ledger(spark, settings, store, lineage, newest + 1)
    replay = load_ledger(spark, settings, store, lineage, newest)
    # The same as summing the history, both for the next batch and for a replay of the newest one.
    for fast, before_batch in ((after, newest + 1), (replay, newest)):
        assert _same(fast, scan_ledger(spark, settings, store, lineage, before_batch))
    assert replay.audited and not after.audited
    # And the same as the produced records say: every partition's counts and highest offset.
    exp = expected(ref.records, settings.max_value_bytes)
    totals = [sum(c[i] for c in after.counts.values()) for i in range(4)]
    assert totals == [exp.records_in, exp.applied, exp.dead_lettered, exp.tombstones]
    assert exp.dead_lettered == 2
    highest = {}
    for r in ref.records:
        highest[r.partition] = max(highest.get(r.partition, -1), r.offset)
    assert after.hi == highest
    per_partition = {p: sum(1 for r in ref.records if r.partition == p) for p in highest}
    assert {p: c[0] for p, c in after.counts.items()} == per_partition

    moved = move_older_audit_files(spark, settings, STORE, newest, tmp_path / "away")
    assert moved  # the copies of earlier runs (one file per audit copy, whatever the batches per copy)
    try:
        spark.catalog.clearCache()
        again = load_ledger(spark, settings, store, lineage, newest + 1)
        assert (again.counts, again.hi) == (after.counts, after.hi)
        with pytest.raises(Exception, match="FILE_NOT_EXIST|does not exist|FileNotFound"):
            scan_ledger(spark, settings, store, lineage, newest + 1)
    finally:
        restore_files(moved)

    # Tables the log cannot answer for are summed instead: expiring txn entries, and a newest row
    # written before totals_before existed (the next run then starts from the scan).
    intake = f"delta.`{settings.table_path(STORE, INTAKE)}`"
    spark.sql(f"ALTER TABLE {intake} SET TBLPROPERTIES ('{TXN_RETENTION}' = 'interval 30 days')")
    moved = move_older_audit_files(spark, settings, STORE, newest, tmp_path / "away")
    try:
        spark.catalog.clearCache()
        with pytest.raises(Exception, match="FILE_NOT_EXIST|does not exist|FileNotFound"):
            load_ledger(spark, settings, store, lineage, newest + 1)
    finally:
        restore_files(moved)
    assert _same(load_ledger(spark, settings, store, lineage, newest + 1), after)
    spark.sql(f"ALTER TABLE {intake} UNSET TBLPROPERTIES ('{TXN_RETENTION}')")
    spark.sql(f"UPDATE {intake} SET totals_before = NULL WHERE batch_id = {newest}")
    assert _same(load_ledger(spark, settings, store, lineage, newest + 1), after)
    assert _same(load_ledger(spark, settings, store, lineage, newest), replay)

    # The next run starts from there and the store still equals the reference.
    produce(settings, topic, stream[1_700:], ref)
    run_store(settings, STORE, once=True, topic=topic, max_offsets_per_trigger=700)
    exp = expected(ref.records, settings.max_value_bytes)
    assert_counts(exp, None, spark, settings)
    assert_state(published_state(spark, settings), exp)
