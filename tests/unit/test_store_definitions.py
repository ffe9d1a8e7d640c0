"""Store definition files are user input: every rule refuses with the file, the key path and what is
allowed, and every declared option reaches the object the engine reads."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from deltastate.config import PROJECT_ROOT
from deltastate.errors import StoreDefinitionError
from deltastate.stores.parse import parse_store
from deltastate.stores.state import PROVIDER_KEY, PROVIDERS, ROCKSDB_PREFIX, SPARK_NAMES, StateSettings

SCHEMAS = PROJECT_ROOT / "schemas"


def declared(name: str) -> dict[str, Any]:
    return yaml.safe_load((SCHEMAS / "stores" / f"{name}.yaml").read_text())


def parse(tmp_path: Path, name: str, raw: Any):
    path = tmp_path / f"{name}.yaml"
    path.write_text(raw if isinstance(raw, str) else yaml.safe_dump(raw))
    return parse_store(SCHEMAS, name, path), path


def edited(name: str, edit: Callable[[dict[str, Any]], Any]) -> dict[str, Any]:
    raw = copy.deepcopy(declared(name))
    edit(raw)
    return raw


def put(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(raw: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node = raw
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    return edit


def drop(path: str) -> Callable[[dict[str, Any]], None]:
    def edit(raw: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node = raw
        for part in parents:
            node = node[part]
        del node[last]
    return edit


REFUSED = [
    # (store, edit, fragments the message must quote)
    ("trade_stats", put("retenion", "1h"), ["retenion: unknown key", "allowed here:", "window"]),
    ("trade_stats", put("window.retenion", "1h"), ["window.retenion: unknown key", "size, advance, grace, retention"]),
    ("player_stats", put("source.partitions", "four"), ["source.partitions", "'four'"]),
    ("player_stats", put("type", "table"), ["type:", "'key_value'", "'window'", "'session'", "'table'"]),
    ("player_stats", drop("source.topic"), ["source.topic: required key is missing"]),
    ("trade_stats", put("window.size", "5 parsecs"), ["window.size", "not a duration"]),
    ("trade_stats", put("window.advance", "10s"), ["window", "advance (10000 ms) must divide size (5000 ms)"]),
    ("trade_stats", put("window.advance", "2s"), ["advance (2000 ms) must divide size (5000 ms)"]),
    ("trade_stats", put("window.retention", "6s"), ["retention (6000 ms) must be at least size + grace (7000 ms)"]),
    ("trade_stats", put("window.grace", -1), ["window.grace", "negative duration"]),
    ("user_sessions", put("session.gap", "0s"), ["session.gap", "greater than 0"]),
    ("user_sessions", put("session.retention", "30min"), ["retention (1800000 ms) must be at least gap + grace"]),
    ("player_stats", put("window", {"size": "5s"}), ["a key_value store takes no 'window' block"]),
    ("trade_stats", drop("window"), ["a window store needs a 'window' block"]),
    ("user_sessions", put("window", {"size": "5s"}), ["a session store takes no 'window' block"]),
    ("trade_stats", put("state", {"provider": "memory"}), ["'state' applies to key_value stores only"]),
    ("trade_stats", put("ttl", "1h"), ["'ttl' applies to key_value stores only"]),
    ("trade_stats", put("max_entries", 100), ["'max_entries' applies to key_value stores only"]),
    ("player_stats", put("max_entries", 3), ["max_entries (3) must be at least source.partitions (4)"]),
    ("player_stats", put("max_entries", 0), ["max_entries", "greater than or equal to 1"]),
    ("trade_stats", put("changelog.enabled", False), ["changelog.enabled: false applies to key_value stores only"]),
    ("player_stats", lambda raw: raw.update(max_entries=8, changelog={"enabled": False}),
     ["cannot be combined with max_entries"]),
    ("player_stats", lambda raw: raw.update(ttl="1h", changelog={"enabled": False}), ["cannot be combined with ttl"]),
    ("player_stats", put("changelog.enabled", "sometimes"), ["changelog.enabled", "boolean"]),
    ("player_stats", put("ttl", "soon"), ["ttl", "not a duration"]),
    ("player_stats", put("state.rocksdb.block_size", 16),
     ["state.rocksdb.block_size: unknown key", "block_size_kb", "compression"]),
    ("player_stats", put("state.provider", "leveldb"), ["state.provider", "'rocksdb'", "'memory'", "'leveldb'"]),
    ("player_stats", put("state", {"provider": "memory", "rocksdb": {"compression": "lz4"}}),
     ["'rocksdb' options apply to provider rocksdb only"]),
    ("player_stats", put("state.rocksdb.compression", "brotli"), ["state.rocksdb.compression", "'zstd'", "'brotli'"]),
    ("player_stats", put("state.rocksdb.max_memory_usage_mb", 512),
     ["max_memory_usage_mb takes effect only with bounded_memory_usage: true"]),
    ("player_stats", put("state.rocksdb.block_size_kb", "big"), ["state.rocksdb.block_size_kb", "'big'"]),
    ("player_stats", put("state.max_memory", "lots"), ["state.max_memory", "not a size: 'lots'"]),
    ("player_stats", put("state", {"provider": "memory", "max_memory": "512MB"}),
     ["max_memory bounds RocksDB's memory: it applies to provider rocksdb only"]),
    ("player_stats", put("state", {"max_memory": "512MB", "rocksdb": {"bounded_memory_usage": True}}),
     ["give max_memory or rocksdb.bounded_memory_usage/max_memory_usage_mb, not both"]),
    ("player_stats", put("aggregations.games", {"op": "median"}), ["aggregations.games.op", "'count'", "'median'"]),
    ("player_stats", put("aggregations.games", {"op": "count", "field": "score"}),
     ["aggregations.games", "count reads no field"]),
    ("player_stats", put("aggregations.total_score", {"op": "sum"}), ["aggregations.total_score", "sum needs an event field"]),
    ("player_stats", put("aggregations.total_score", {"op": "sum", "field": "points"}),
     ["aggregation 'total_score' reads 'points', not a field of game_result.v1", "score"]),
    ("player_stats", put("aggregations.streak", {"op": "count"}), ["aggregation 'streak' is not a field of value schema"]),
    ("player_stats", put("aggregations.total_score", {"op": "avg", "field": "score"}),
     ["op 'avg' is only available to window and session stores"]),
    ("player_stats", put("aggregations.total_score", {"op": "sum", "field": "player_id"}),
     ["sum needs a numeric field, 'player_id' is a string"]),
    ("player_stats", put("aggregations", {}), ["aggregations", "at least 1"]),
    ("player_stats", drop("aggregations.best_score"), ["value fields without an aggregation: best_score"]),
    ("player_stats", put("name", "players"), ["name: the file declares 'players'"]),
    ("player_stats", put("leaderboard.default_by", "rank"), ["leaderboard.default_by 'rank' is not a value field"]),
    ("player_stats", put("tombstone", {"field": "player_id", "equals": "x"}),
     ["a field tombstone rule is only available to window and session stores"]),
    ("pulse_counts", put("tombstone", {"field": "ts", "equals": "x"}), ["tombstone.field 'ts' must be a string event field"]),
    ("pulse_counts", put("tombstone", {"field": "event"}), ["tombstone.equals: required key is missing"]),
    ("player_stats", put("changelog.min_cleanable_dirty_ratio", 1.5), ["changelog.min_cleanable_dirty_ratio", "1.5"]),
    ("player_stats", put("event_time_field", "player_id"), ["event_time_field 'player_id' must be an integer"]),
    ("player_stats", put("source.key_field", "score"), ["key field 'score' must be a string property"]),
]


@pytest.mark.parametrize(("store", "edit", "fragments"), REFUSED, ids=[
    f"{store}-{'-'.join(f.split(':')[0] for f in frags[:1])}-{i}" for i, (store, _, frags) in enumerate(REFUSED)])
def test_a_broken_definition_is_refused_naming_file_and_key(tmp_path, store, edit, fragments):
    with pytest.raises(StoreDefinitionError) as caught:
        parse(tmp_path, store, edited(store, edit))
    message = str(caught.value)
    assert f"{tmp_path / store}.yaml" in message
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"


def test_a_file_that_is_not_a_mapping_is_refused(tmp_path):
    with pytest.raises(StoreDefinitionError, match="expected a mapping of settings, got list"):
        parse(tmp_path, "player_stats", "- a\n- b\n")


def test_invalid_yaml_is_refused_with_the_parser_position(tmp_path):
    with pytest.raises(StoreDefinitionError, match="(?s)not valid YAML.*line 2"):
        parse(tmp_path, "player_stats", "name: player_stats\ntype: [key_value\n")


def test_every_error_of_a_file_is_reported_at_once(tmp_path):
    raw = edited("trade_stats", lambda r: (put("retenion", "1h")(r), put("window.grace", "soon")(r)))
    with pytest.raises(StoreDefinitionError) as caught:
        parse(tmp_path, "trade_stats", raw)
    assert "retenion: unknown key" in str(caught.value) and "window.grace" in str(caught.value)


@pytest.mark.parametrize("name", ["player_stats", "trade_stats", "pulse_counts", "user_sessions"])
def test_declared_stores_load(tmp_path, name):
    store, _ = parse(tmp_path, name, declared(name))
    assert store.name == name and store.type == declared(name)["type"]


def test_window_settings_reach_the_definition(tmp_path):
    store, _ = parse(tmp_path, "trade_stats", edited("trade_stats", put("window", {
        "size": "10s", "advance": "2s", "grace": "500ms", "retention": "2h"})))
    assert (store.window.size_ms, store.window.advance_ms, store.window.grace_ms, store.window.retention_ms) == (
        10_000, 2_000, 500, 7_200_000)
    assert not store.window.tumbling


def test_a_window_without_advance_is_tumbling(tmp_path):
    store, _ = parse(tmp_path, "trade_stats", edited("trade_stats", put("window", {"size": "5s"})))
    assert store.window.advance_ms == store.window.size_ms == 5_000 and store.window.retention_ms == 86_400_000


def test_state_settings_map_to_sparks_keys(tmp_path):
    store, _ = parse(tmp_path, "player_stats", edited("player_stats", put("state", {"provider": "rocksdb", "rocksdb": {
        "compression": "zstd", "block_size_kb": 16, "bounded_memory_usage": True, "max_memory_usage_mb": 512,
        "changelog_checkpointing": False}})))
    conf = store.state.spark_conf()
    assert conf[PROVIDER_KEY] == PROVIDERS["rocksdb"]
    assert conf[ROCKSDB_PREFIX + "compression"] == "zstd"
    assert conf[ROCKSDB_PREFIX + "blockSizeKB"] == "16"
    assert conf[ROCKSDB_PREFIX + "boundedMemoryUsage"] == "true"
    assert conf[ROCKSDB_PREFIX + "maxMemoryUsageMB"] == "512"
    assert conf[ROCKSDB_PREFIX + "changelogCheckpointing.enabled"] == "false"
    # every option the file does not set goes back to Spark's default for this store's query
    assert conf[ROCKSDB_PREFIX + "writeBufferSizeMB"] is None
    assert set(conf) == {PROVIDER_KEY, *(ROCKSDB_PREFIX + suffix for suffix in SPARK_NAMES.values())}


@pytest.mark.parametrize(("given", "megabytes"), [("512MB", 512), ("2GB", 2048), ("2048KB", 2), (300, 300)])
def test_max_memory_bounds_rocksdb(tmp_path, given, megabytes):
    store, _ = parse(tmp_path, "player_stats", edited("player_stats", put("state", {"max_memory": given})))
    conf = store.state.spark_conf()
    assert conf[ROCKSDB_PREFIX + "boundedMemoryUsage"] == "true"
    assert conf[ROCKSDB_PREFIX + "maxMemoryUsageMB"] == str(megabytes)


def test_the_memory_provider_unsets_every_rocksdb_key():
    conf = StateSettings(provider="memory").spark_conf()
    assert conf[PROVIDER_KEY] == PROVIDERS["memory"]
    assert all(value is None for key, value in conf.items() if key.startswith(ROCKSDB_PREFIX))
