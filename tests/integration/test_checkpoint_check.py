"""`run` refuses a checkpoint that disagrees with the changelog (real broker, Spark, Delta), with a
message that says to restore; after `restore`, the store continues and matches the reference."""


import shutil
from pathlib import Path

import pytest
from support.reference import expected
from support.store_checks import (
    STORE,
    assert_changelog_unique,
    assert_counts,
    assert_state,
    generated,
    new_topic,
    produce,
    published_state,
)

from deltastate.engine import run_store
from deltastate.errors import CheckpointMismatchError
from deltastate.maintenance.restore import restore_store

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1800)]


def _refused(settings, topic: str, why: str) -> None:
    with pytest.raises(CheckpointMismatchError, match=why) as caught:
        run_store(settings, STORE, once=True, topic=topic)
    assert f"deltastate restore {STORE}" in str(caught.value) and STORE in str(caught.value)


def _swap(checkpoint: Path, copy: Path) -> None:
    shutil.rmtree(checkpoint)
    shutil.copytree(copy, checkpoint)


def test_run_refuses_disagreeing_checkpoints(broker: str, spark, make_settings, topic: str, tmp_path: Path) -> None:
    settings = make_settings()
    ref = new_topic(settings, broker, topic)
    stream = generated(6_000, 600, seed=31, tombstones=0.03)
    parts = [stream[i:i + 1_500] for i in range(0, len(stream), 1_500)]
    checkpoint = Path(settings.checkpoint_path(STORE))

    produce(settings, topic, parts[0], ref)
    run_store(settings, STORE, once=True, topic=topic)
    shutil.copytree(checkpoint, tmp_path / "after-batch-0")
    produce(settings, topic, parts[1], ref)
    run_store(settings, STORE, once=True, topic=topic)
    shutil.copytree(checkpoint, tmp_path / "good")

    # A checkpoint older than the changelog's last batch of its own lineage (a stale copy put back).
    _swap(checkpoint, tmp_path / "after-batch-0")
    _refused(settings, topic, "is older than the changelog/intake table")
    # A query checkpoint without its metadata file.
    _swap(checkpoint, tmp_path / "good")
    (checkpoint / "stream" / "metadata").unlink()
    _refused(settings, topic, "no metadata file")
    # The state folder gone while batches are committed.
    _swap(checkpoint, tmp_path / "good")
    shutil.rmtree(checkpoint / "stream" / "state")
    _refused(settings, topic, "state folder")
    _swap(checkpoint, tmp_path / "good")
    # A restore elsewhere superseded this lineage: putting the old checkpoint back is refused.
    report = restore_store(settings, STORE, spark=spark)
    assert report.epoch == 1
    produce(settings, topic, parts[2] + parts[3], ref)  # the restored checkpoint passes the check and runs
    assert run_store(settings, STORE, once=True, topic=topic).records_in == len(parts[2]) + len(parts[3])
    restored = tmp_path / "restored"
    shutil.copytree(checkpoint, restored)
    _swap(checkpoint, tmp_path / "good")
    _refused(settings, topic, "superseded")
    _swap(checkpoint, restored)

    exp = expected(ref.records, settings.max_value_bytes)
    assert_counts(exp, None, spark, settings)
    assert_changelog_unique(spark, settings)
    assert_state(published_state(spark, settings), exp)


def test_run_recovers_from_a_kill_while_spark_wrote_its_first_offsets_entry(broker: str, spark, make_settings,
                                                                             topic: str) -> None:
    """A kill -9 while Spark writes offsets/0 leaves its temp file (seen in a crash trial); Spark 4
    then refuses the non-empty offsets folder at batch 0 for ever. `run` removes such orphans."""
    settings = make_settings()
    ref = new_topic(settings, broker, topic)
    run_store(settings, STORE, once=True, topic=topic)  # empty topic: a checkpoint, no batch yet
    checkpoint = Path(settings.checkpoint_path(STORE))
    planted = []
    for query in ("stream",):
        offsets = checkpoint / query / "offsets"
        offsets.mkdir(parents=True, exist_ok=True)
        for name in (".0.0b1e5c2a-8d6f-4f3e-9a7b-5c4d3e2f1a0b.tmp", "..0.0b1e5c2a-8d6f-4f3e-9a7b-5c4d3e2f1a0b.tmp.crc"):
            (offsets / name).write_text("v1\n")
            planted.append(offsets / name)
    produce(settings, topic, generated(2_000, 150, seed=41, tombstones=0.03), ref)
    run_store(settings, STORE, once=True, topic=topic)
    assert not any(p.exists() for p in planted)
    exp = expected(ref.records, settings.max_value_bytes)
    assert_counts(exp, None, spark, settings)
    assert_changelog_unique(spark, settings)
    assert_state(published_state(spark, settings), exp)


def test_the_check_reads_the_delta_logs_not_the_running_lineages_data(broker: str, spark, make_settings,
                                                                       topic: str, tmp_path: Path) -> None:
    """The check runs before every run, so it must not cost a scan of the history: with every data
    file of the changelog and intake moved away (the logs untouched), it still passes a good
    checkpoint and still refuses a stale one, which only the Delta logs can tell it."""
    from deltastate.changelog.layout import CHANGELOG, INTAKE
    from deltastate.engine.common.checkpoint_check import verify_checkpoint
    from deltastate.stores import load_store

    settings = make_settings()
    ref = new_topic(settings, broker, topic)
    checkpoint = Path(settings.checkpoint_path(STORE))
    stream = generated(3_000, 300, seed=43, tombstones=0.03)
    produce(settings, topic, stream[:1_500], ref)
    run_store(settings, STORE, once=True, topic=topic)
    shutil.copytree(checkpoint, tmp_path / "stale")
    produce(settings, topic, stream[1_500:], ref)
    run_store(settings, STORE, once=True, topic=topic)
    store = load_store(settings, STORE)

    moved = []
    for name in (CHANGELOG, INTAKE):
        table_dir = Path(settings.table_path(STORE, name))
        for data in [f for f in table_dir.rglob("*.parquet") if "_delta_log" not in f.parts]:
            away = tmp_path / "away" / data.relative_to(table_dir.parent)
            away.parent.mkdir(parents=True, exist_ok=True)
            data.rename(away)
            moved.append((away, data))
    assert len(moved) >= 4  # two batches in each table
    try:
        spark.catalog.clearCache()
        verify_checkpoint(spark, settings, store)
        good = tmp_path / "good"
        shutil.copytree(checkpoint, good)
        _swap(checkpoint, tmp_path / "stale")
        with pytest.raises(CheckpointMismatchError, match="is older than the changelog/intake table"):
            verify_checkpoint(spark, settings, store)
        _swap(checkpoint, good)
    finally:
        for away, data in moved:
            away.rename(data)
    # Without its lineage.json the checkpoint is refused; the one lineage wrote both tables.
    marker = checkpoint / "lineage.json"
    kept = marker.read_text()
    marker.unlink()
    with pytest.raises(CheckpointMismatchError, match=r"tables hold batches of 1 earlier run\(s\)"):
        verify_checkpoint(spark, settings, store)
    marker.write_text(kept)
    exp = expected(ref.records, settings.max_value_bytes)
    assert_counts(exp, None, spark, settings)
    assert_state(published_state(spark, settings), exp)
