"""A key-value store's `state:` block is applied to its own streaming query: two stores in one Spark
session keep different providers and RocksDB options, read back from each query's session and from
its checkpoint on disk, and each store still equals the reference."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest
import yaml
from support.reference import VALUE_FIELDS, expected
from support.store_checks import generated, new_topic, produce

from deltastate.engine import run_store
from deltastate.engine.common.checkpoint_check import checkpoint_state_provider
from deltastate.errors import CheckpointMismatchError
from deltastate.query import Queries
from deltastate.snapshot import publish_snapshot
from deltastate.stores import load_store
from deltastate.stores.state import DEFAULT_STATE, PROVIDER_KEY, PROVIDERS, ROCKSDB_PREFIX

pytestmark = pytest.mark.integration
REPO_SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"
STATES = {
    "players_tuned": {"provider": "rocksdb", "rocksdb": {"compression": "zstd", "block_size_kb": 8,
                                                         "write_buffer_size_mb": 16, "changelog_checkpointing": True}},
    "players_memory": {"provider": "memory"},
}


def declare(schemas: Path, name: str, state: dict) -> None:
    raw = yaml.safe_load((REPO_SCHEMAS / "stores" / "player_stats.yaml").read_text())
    raw.update(name=name, state=state)
    (schemas / "stores" / f"{name}.yaml").write_text(yaml.safe_dump(raw))


def state_files(checkpoint: str) -> set[str]:
    """The file kinds the store's state shards hold: .changelog (RocksDB changelog checkpointing),
    .zip (RocksDB snapshots), .delta / .snapshot (the HDFS-backed in-memory provider)."""
    return {p.suffix for p in Path(checkpoint, "stream", "state").rglob("*") if p.is_file() and p.suffix}


def test_two_stores_in_one_process_keep_their_own_state_settings(broker, spark, make_settings, topic, tmp_path):
    schemas = tmp_path / "schemas"
    shutil.copytree(REPO_SCHEMAS, schemas)
    for name, state in STATES.items():
        declare(schemas, name, state)
    settings = dataclasses.replace(make_settings(), schemas_dir=schemas)
    ref = new_topic(settings, broker, topic)
    produce(settings, topic, generated(600, 40, seed=11, tombstones=0.05), ref)
    want = expected(ref.records)
    session_before = {key: spark.conf.get(key, None) for key in DEFAULT_STATE.spark_conf()}

    results = {name: run_store(settings, name, once=True, topic=topic) for name in STATES}

    tuned, memory = (load_store(settings, name) for name in STATES)
    for name, store in (("players_tuned", tuned), ("players_memory", memory)):
        declared = {key: value for key, value in store.state.spark_conf().items() if value is not None}
        assert {key: results[name].state_conf[key] for key in declared} == declared, name
    assert results["players_tuned"].state_conf[ROCKSDB_PREFIX + "compression"] == "zstd"
    assert results["players_tuned"].state_conf[ROCKSDB_PREFIX + "blockSizeKB"] == "8"
    assert results["players_memory"].state_conf[PROVIDER_KEY] == PROVIDERS["memory"]
    assert results["players_memory"].state_conf[ROCKSDB_PREFIX + "compression"] is None
    # The session itself is left as it was: a third query starts from the defaults.
    assert {key: spark.conf.get(key, None) for key in DEFAULT_STATE.spark_conf()} == session_before

    # On disk: each checkpoint's offset log pins its own provider, and the shards hold that provider's files.
    for name, provider in (("players_tuned", "rocksdb"), ("players_memory", "memory")):
        checkpoint = results[name].lineage.checkpoint
        assert checkpoint_state_provider(str(Path(checkpoint) / "stream")) == PROVIDERS[provider]
    assert ".changelog" in state_files(results["players_tuned"].lineage.checkpoint)
    assert ".delta" in state_files(results["players_memory"].lineage.checkpoint)
    assert not {".changelog", ".zip"} & state_files(results["players_memory"].lineage.checkpoint)

    publish_snapshot(spark, settings, [tuned, memory])
    with Queries(settings) as queries:
        for name in STATES:
            rows = queries.all(name).rows
            assert {r["key"]: {f: r[f] for f in VALUE_FIELDS} for r in rows} == want.state, name
            assert (results[name].records_in, results[name].applied, results[name].dead_lettered) == (
                want.records_in, want.applied, want.dead_lettered)


def test_changing_the_provider_of_a_started_store_is_refused(broker, spark, make_settings, topic, tmp_path):
    schemas = tmp_path / "schemas"
    shutil.copytree(REPO_SCHEMAS, schemas)
    declare(schemas, "players_memory", STATES["players_memory"])
    settings = dataclasses.replace(make_settings(), schemas_dir=schemas)
    ref = new_topic(settings, broker, topic)
    produce(settings, topic, generated(50, 10, seed=3), ref)
    first = run_store(settings, "players_memory", once=True, topic=topic)
    assert first.records_in == 50

    declare(schemas, "players_memory", {"provider": "rocksdb"})
    produce(settings, topic, generated(20, 10, seed=4), ref)
    with pytest.raises(CheckpointMismatchError, match=r"state.provider 'rocksdb'.*HDFSBackedStateStoreProvider"):
        run_store(settings, "players_memory", once=True, topic=topic)
    # Put back, the store continues from its checkpoint with nothing lost or counted twice.
    declare(schemas, "players_memory", STATES["players_memory"])
    assert run_store(settings, "players_memory", once=True, topic=topic).records_in == 20
