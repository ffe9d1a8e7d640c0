"""backend_of picks one backend per kind of store, from definitions the loader builds out of the
declared store files (schemas/stores), and each backend answers what its callers ask of that kind."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from deltastate.changelog import layout
from deltastate.config import PROJECT_ROOT
from deltastate.errors import StoreDefinitionError
from deltastate.stores.backends import StoreBackend, backend_of, backends, cleanup_lineage_ids
from deltastate.stores.definition import StoreDefinition
from deltastate.stores.parse import parse_store

SCHEMAS = PROJECT_ROOT / "schemas"


def _lru(raw: dict[str, Any]) -> None:
    raw.pop("migrations", None)  # migrations need a store that keeps every key
    raw["max_entries"] = 10


def _unlogged(raw: dict[str, Any]) -> None:
    raw.pop("migrations", None)  # migrations are seeded from the changelog
    raw["changelog"] = {"enabled": False}


def _as_declared(raw: dict[str, Any]) -> None:
    pass


# kind -> (declared store file, the edit that makes it that kind)
KINDS: dict[str, tuple[str, Callable[[dict[str, Any]], None]]] = {
    "key_value": ("player_stats", _as_declared),
    "lru": ("player_stats", _lru),
    "unlogged": ("player_stats", _unlogged),
    "window": ("trade_stats", _as_declared),
    "session": ("user_sessions", _as_declared),
}


def definition(tmp_path: Path, kind: str) -> StoreDefinition:
    name, edit = KINDS[kind]
    raw = yaml.safe_load((SCHEMAS / "stores" / f"{name}.yaml").read_text())
    edit(raw)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return parse_store(SCHEMAS, name, path)


@pytest.mark.parametrize("kind", list(KINDS))
def test_backend_of_picks_the_backend_of_each_kind(tmp_path, kind):
    backend = backend_of(definition(tmp_path, kind))
    assert isinstance(backend, StoreBackend)
    assert backend.kind == kind
    assert backend.store_type == definition(tmp_path, kind).type


def test_there_is_one_backend_per_kind():
    assert sorted(b.kind for b in backends()) == sorted(KINDS)


def test_a_backend_is_immutable(tmp_path):
    backend = backend_of(definition(tmp_path, "key_value"))
    with pytest.raises(AttributeError):
        backend.has_changelog = False  # type: ignore[misc]


def test_a_type_no_backend_serves_is_refused(tmp_path):
    import dataclasses

    odd = dataclasses.replace(definition(tmp_path, "key_value"), type="table")
    with pytest.raises(ValueError, match="no backend serves store type 'table'"):
        backend_of(odd)


# kind -> (key columns, changelog, state in Spark, restore mode, snapshot source, read index, migratable)
FACTS = {
    "key_value": (("key",), True, True, "full", "changelog", True, True),
    "lru": (("key",), True, True, "full", "changelog", True, False),
    "unlogged": (("key",), False, True, "replay", "state_store", True, False),
    "window": (("key", "window_start", "window_end"), True, False, "partial", "changelog", False, True),
    "session": (("key", "window_start", "window_end"), True, False, "partial", "changelog", False, True),
}


@pytest.mark.parametrize("kind", list(FACTS))
def test_each_backend_states_its_facts(tmp_path, kind):
    store = definition(tmp_path, kind)
    b = backend_of(store)
    assert (b.key_columns, b.has_changelog, b.spark_state, b.restore_mode, b.snapshot_source, b.read_index,
            b.migratable) == FACTS[kind]
    assert layout.store_key_columns(store) == b.key_columns


def test_what_a_migration_needs_matches_what_the_loader_allows(tmp_path):
    """A store whose backend is not migratable cannot declare migrations (the loader refuses them)."""
    for kind in ("lru", "unlogged"):
        name, edit = KINDS[kind]
        raw = yaml.safe_load((SCHEMAS / "stores" / f"{name}.yaml").read_text())
        migrations = raw["migrations"]
        edit(raw)
        raw["migrations"] = migrations
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(raw))
        with pytest.raises(StoreDefinitionError, match="migrations need a logged store that keeps every key"):
            parse_store(SCHEMAS, name, path)
        assert not backend_of(definition(tmp_path, kind)).migratable


def test_changelog_columns_follow_the_backend(tmp_path):
    names = {kind: [n for n, _ in layout.changelog_columns(definition(tmp_path, kind))] for kind in KINDS}
    assert names["key_value"][0] == "key" and "window_start" not in names["key_value"]
    assert names["lru"][-1] == layout.DELETE_REASON and layout.DELETE_REASON not in names["key_value"]
    assert names["window"][:3] == ["key", "window_start", "window_end"] and layout.EVENTS in names["window"]
    assert names["session"][:3] == ["key", "window_start", "window_end"] and layout.EVENTS in names["session"]
    assert layout.EVENTS not in names["unlogged"]


@pytest.mark.parametrize(("kind", "answered", "hint"), [
    ("key_value", {"get", "top", "rank", "range", "all"}, "use get/range/all"),
    ("lru", {"get", "top", "rank", "range", "all"}, "use get/range/all"),
    ("unlogged", {"get", "top", "rank", "range", "all"}, "use get/range/all"),
    ("window", {"windows", "range", "all"}, "use windows"),
    ("session", {"sessions", "range", "all"}, "use sessions"),
])
def test_reads_answered_and_the_hint_for_the_others(tmp_path, kind, answered, hint):
    b = backend_of(definition(tmp_path, kind))
    reads = ("get", "top", "rank", "range", "all", "windows", "sessions")
    assert {r for r in reads if b.answers(r)} == answered
    assert b.read_hint == hint


NO_CHANGELOG = ("store 'player_stats' keeps no changelog (changelog.enabled: false): only its published snapshot "
                "can be read")


@pytest.mark.parametrize(("kind", "latest", "fresh"), [
    ("key_value", None, None),
    ("lru", "store 'player_stats' is an LRU store (max_entries): its evictions depend on every key's records; "
            "use committed", None),
    ("unlogged", NO_CHANGELOG, NO_CHANGELOG),
    ("window", "store 'trade_stats' is a window store: latest applies to key-value stores; use committed", None),
    ("session", "store 'user_sessions' is a session store: latest applies to key-value stores; use committed", None),
])
def test_refused_reads_say_why(tmp_path, kind, latest, fresh):
    store = definition(tmp_path, kind)
    assert backend_of(store).latest_refusal(store) == latest
    assert backend_of(store).fresh_refusal(store) == fresh


def test_cleanup_rules(tmp_path):
    rules = {}
    for kind in KINDS:
        store = definition(tmp_path, kind)
        b = backend_of(store)
        rules[kind] = (b.expiry, b.expired_counter, b.cleanup_lineage_id, b.retention_spec(store))
    trade, sessions = definition(tmp_path, "window"), definition(tmp_path, "session")
    assert rules == {
        "key_value": ("ttl", "expired_keys", None, None),
        "lru": ("ttl", "expired_keys", None, None),
        "unlogged": ("ttl", "expired_keys", None, None),
        "window": ("retention", "expired_windows", "deltastate-cleanup/window-retention", trade.window),
        "session": ("retention", "expired_sessions", "deltastate-cleanup/session-expiry", sessions.session),
    }
    assert cleanup_lineage_ids() == ("deltastate-cleanup/session-expiry", "deltastate-cleanup/window-retention")


def test_engine_and_capacities(tmp_path):
    engines = {kind: backend_of(definition(tmp_path, kind)).engine for kind in KINDS}
    assert engines == {"key_value": "keyvalue", "lru": "keyvalue", "unlogged": "keyvalue",
                       "window": "windowed", "session": "windowed"}
    lru = definition(tmp_path, "lru")
    assert backend_of(lru).evicts and not backend_of(definition(tmp_path, "key_value")).evicts
    assert backend_of(lru).partition_capacities(lru) == (3, 3, 2, 2)  # 10 keys over 4 partitions
    assert backend_of(definition(tmp_path, "key_value")).partition_capacities(definition(tmp_path, "key_value")) is None


def _key_count(raw: dict[str, Any]) -> None:
    raw.pop("migrations", None)
    raw["type"] = "key_count"


def test_a_registered_kind_is_a_store_type_until_unregistered(tmp_path):
    from support.counting_backend import COUNTING_BACKEND, counting_backend_registered

    name = "player_stats"
    raw = yaml.safe_load((SCHEMAS / "stores" / f"{name}.yaml").read_text())
    _key_count(raw)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(StoreDefinitionError, match="unknown store type 'key_count'"):
        parse_store(SCHEMAS, name, path)
    with counting_backend_registered():
        store = parse_store(SCHEMAS, name, path)
        assert store.type == "key_count" and backend_of(store) is COUNTING_BACKEND
        assert COUNTING_BACKEND in backends()
        raw["max_entries"] = 10  # a variant of the built-in key_value type only
        path.write_text(yaml.safe_dump(raw))
        with pytest.raises(StoreDefinitionError, match="'max_entries' applies to key_value stores only"):
            parse_store(SCHEMAS, name, path)
    assert COUNTING_BACKEND not in backends()


def test_a_kind_or_type_already_served_is_refused():
    from support.counting_backend import COUNTING_BACKEND, counting_backend_registered

    from deltastate.stores.backends import register_backend, unregister_backend
    from deltastate.stores.backends.keyvalue import KEY_VALUE_BACKEND

    with pytest.raises(ValueError, match="registered already"):
        register_backend(KEY_VALUE_BACKEND)
    with counting_backend_registered(), pytest.raises(ValueError, match="registered already"):
        register_backend(COUNTING_BACKEND)
    with pytest.raises(ValueError, match="built-in"):
        unregister_backend("window")
