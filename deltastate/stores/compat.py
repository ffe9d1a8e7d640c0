"""Which changes to a store definition its existing checkpoint and changelog can survive.

The changelog records what a definition produced; the state a checkpoint holds was folded by it.
Changing how keys, windows or values are computed would mix two meanings in one store, so such a
change is refused before the first batch, with the list of what changed. Retention, TTL, changelog
and description settings are free to change: they say how long state is kept, not what it means.
"""

from __future__ import annotations

import json
from typing import Any

from deltastate.stores.definition import StoreDefinition

PROPERTY = "deltastate.definition"


def fingerprint(store: StoreDefinition) -> dict[str, Any]:
    """The parts of a definition that decide what the state means, as plain JSON values."""
    rule = store.tombstone_rule
    return {
        "type": store.type,
        "key_field": store.key_field,
        "event_time_field": store.event_time_field,
        "value_schema": store.value_schema_name,
        "value_version": store.value_version,
        "value_fields": [[f.name, f.type] for f in store.value_fields],
        "aggregations": [[a.target, a.op, a.source_field] for a in store.aggregations],
        "tombstone": [rule.null_value, rule.field, rule.equals],
        "window": None if store.window is None else {
            "size_ms": store.window.size_ms, "advance_ms": store.window.advance_ms, "grace_ms": store.window.grace_ms},
        "session": None if store.session is None else {
            "gap_ms": store.session.gap_ms, "grace_ms": store.session.grace_ms},
        # Which keys an LRU store evicts depends on its bound. A definition recorded without the
        # key reads None, as does a store that keeps every key.
        "max_entries": store.max_entries,
        # A store without changelog has no history to start one from (and one with a changelog would
        # leave it behind): switching either way needs a new store. Absent for a logged store.
        "changelog_disabled": None if store.changelog.enabled else True,
    }


def encode(store: StoreDefinition) -> str:
    return json.dumps(fingerprint(store), sort_keys=True, separators=(",", ":"))


def differences(recorded: dict[str, Any], current: dict[str, Any], prefix: str = "") -> list[str]:
    """Human lines 'field: old -> new' for every difference, nested keys dotted."""
    out: list[str] = []
    for name in sorted(set(recorded) | set(current)):
        old, new = recorded.get(name), current.get(name)
        if isinstance(old, dict) and isinstance(new, dict):
            out += differences(old, new, f"{prefix}{name}.")
        elif old != new:
            out.append(f"{prefix}{name}: {json.dumps(old)} -> {json.dumps(new)}")
    return out
