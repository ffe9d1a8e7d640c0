"""Reads schemas/stores/*.yaml with the event and value schemas they name, and refuses a definition
that would fail later (unknown op, missing field, type mismatch) with a message naming the store."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from deltastate.config import Settings
from deltastate.errors import StoreDefinitionError, UnknownStoreError
from deltastate.stores.definition import (
    FOLD_OPS,
    STORE_TYPES,
    VALUE_TYPES,
    WINDOWED_ONLY_OPS,
    Aggregation,
    ChangelogOptions,
    SessionSpec,
    SourceSpec,
    StoreDefinition,
    TombstoneRule,
    ValueField,
    WindowSpec,
)
from deltastate.stores.durations import parse_duration_ms

# JSON-schema types an aggregation may read, per value type it produces.
_NUMERIC_JSON = {"integer": "long", "number": "double"}


def list_stores(settings: Settings) -> list[str]:
    return sorted(p.stem for p in (settings.schemas_dir / "stores").glob("*.yaml"))


def load_store(settings: Settings, name: str) -> StoreDefinition:
    path = settings.schemas_dir / "stores" / f"{name}.yaml"
    if not path.is_file():
        raise UnknownStoreError(name, list_stores(settings))
    raw = yaml.safe_load(path.read_text()) or {}
    if raw.get("name", name) != name:
        raise StoreDefinitionError(name, f"file {path.name} declares name {raw.get('name')!r}")
    return _build(settings.schemas_dir, name, raw)


def _load_json(store: str, path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise StoreDefinitionError(store, f"schema file {path} does not exist")
    return json.loads(path.read_text())


def _require(store: str, raw: dict[str, Any], key: str) -> Any:
    if key not in raw or raw[key] in (None, ""):
        raise StoreDefinitionError(store, f"missing required setting {key!r}")
    return raw[key]


def _build(schemas_dir: Path, name: str, raw: dict[str, Any]) -> StoreDefinition:
    store_type = _require(name, raw, "type")
    if store_type not in STORE_TYPES:
        raise StoreDefinitionError(name, f"type {store_type!r} is not one of {', '.join(STORE_TYPES)}")
    src = _require(name, raw, "source")
    event_schema_name = _require(name, src, "event_schema")
    event_schema = _load_json(name, schemas_dir / "events" / f"{event_schema_name}.json")
    source = SourceSpec(
        topic=_require(name, src, "topic"),
        partitions=int(src.get("partitions", 4)),
        key_field=_require(name, src, "key_field"),
        event_schema_name=event_schema_name,
        event_schema=event_schema,
    )
    props = source.properties
    if source.key_field not in props or props[source.key_field].get("type") != "string":
        raise StoreDefinitionError(name, f"key field {source.key_field!r} must be a string property of {event_schema_name}")

    value_schema_name = _require(name, _require(name, raw, "value"), "schema")
    value_schema = _load_json(name, schemas_dir / "values" / f"{value_schema_name}.json")
    fields = []
    for f in value_schema.get("fields", []):
        if f.get("type") not in VALUE_TYPES:
            raise StoreDefinitionError(name, f"value field {f.get('name')!r} has unsupported type {f.get('type')!r}")
        fields.append(ValueField(f["name"], f["type"]))
    value_fields = tuple(fields)
    field_names = {f.name for f in value_fields}

    aggregations = []
    for target, spec in (_require(name, raw, "aggregations") or {}).items():
        op = spec.get("op")
        if op not in FOLD_OPS:
            raise StoreDefinitionError(name, f"aggregation {target!r}: op {op!r} is not one of {', '.join(FOLD_OPS)}")
        if op in WINDOWED_ONLY_OPS and store_type == "key_value":
            raise StoreDefinitionError(name, f"aggregation {target!r}: op {op!r} is only available to window and session stores")
        if target not in field_names:
            raise StoreDefinitionError(name, f"aggregation {target!r} is not a field of value schema {value_schema_name}")
        source_field = spec.get("field")
        if op == "count" and source_field is not None:
            raise StoreDefinitionError(name, f"aggregation {target!r}: count reads no field (got field {source_field!r})")
        if op != "count":
            if source_field not in props:
                raise StoreDefinitionError(name, f"aggregation {target!r} reads {source_field!r}, not a field of {event_schema_name}")
            json_type = props[source_field].get("type")
            produced = _NUMERIC_JSON.get(json_type, "string" if json_type == "string" else None)
            wanted = next(f.type for f in value_fields if f.name == target)
            if op == "avg":
                produced = "double" if produced in ("long", "double") else produced
            if produced != wanted and not (op in ("min", "max", "last") and produced == "long" and wanted == "double"):
                raise StoreDefinitionError(name, f"aggregation {target!r}: {op}({source_field}) gives {produced}, value field is {wanted}")
        aggregations.append(Aggregation(target, op, source_field))
    missing = field_names - {a.target for a in aggregations}
    if missing:
        raise StoreDefinitionError(name, f"value fields without an aggregation: {', '.join(sorted(missing))}")

    cl = raw.get("changelog") or {}
    changelog = ChangelogOptions(
        min_compaction_lag_ms=parse_duration_ms(cl.get("min_compaction_lag", "0s")) or 0,
        min_cleanable_dirty_ratio=float(cl.get("min_cleanable_dirty_ratio", 0.5)),
        delete_retention_ms=parse_duration_ms(cl.get("delete_retention", "24h")) or 0,
    )
    event_time_field = raw.get("event_time_field", "ts")
    if event_time_field not in props or props[event_time_field].get("type") != "integer":
        raise StoreDefinitionError(name, f"event_time_field {event_time_field!r} must be an integer (epoch ms) field")
    # Windows, sessions and stream time need a time on every event; the schema must make a missing
    # or negative one a dead letter, or it would reach the engine (a stuck batch, or a lost record).
    if event_time_field not in source.required or not props[event_time_field].get("minimum", -1) >= 0:
        raise StoreDefinitionError(
            name, f"event_time_field {event_time_field!r} must be required by {event_schema_name} and have "
                  f"\"minimum\": 0 (got required={list(source.required)}, "
                  f"minimum={props[event_time_field].get('minimum')})")
    leaderboard_by = (raw.get("leaderboard") or {}).get("default_by")
    if leaderboard_by is not None and leaderboard_by not in field_names:
        raise StoreDefinitionError(name, f"leaderboard.default_by {leaderboard_by!r} is not a value field")
    window, session = _time_specs(name, store_type, raw)
    tombstone_rule = _tombstone_rule(name, raw.get("tombstone", "null_value"), props)
    if tombstone_rule.field and store_type == "key_value":
        raise StoreDefinitionError(name, "a field tombstone rule is only available to window and session stores")
    return StoreDefinition(
        name=name,
        type=store_type,
        description=raw.get("description", ""),
        source=source,
        value_schema_name=value_schema_name,
        value_version=int(value_schema.get("version", 1)),
        value_fields=value_fields,
        aggregations=tuple(aggregations),
        event_time_field=event_time_field,
        tombstone="null_value" if not isinstance(raw.get("tombstone"), dict) else "field",
        changelog=changelog,
        rocksdb=dict((raw.get("state") or {}).get("rocksdb") or {}),
        leaderboard_default_by=leaderboard_by,
        ttl_ms=_duration(name, raw, "ttl"),
        window=window,
        session=session,
        tombstone_rule=tombstone_rule,
    )


def _duration(store: str, raw: dict[str, Any], key: str, default: Any = None) -> int | None:
    try:
        return parse_duration_ms(raw.get(key, default))
    except ValueError as e:
        raise StoreDefinitionError(store, f"{key}: {e}") from None


def _time_specs(name: str, store_type: str, raw: dict[str, Any]) -> tuple[WindowSpec | None, SessionSpec | None]:
    if store_type == "key_value":
        for key in ("window", "session"):
            if key in raw:
                raise StoreDefinitionError(name, f"a key_value store takes no {key!r} settings")
        return None, None
    if store_type == "window":
        w = _require(name, raw, "window")
        size = _duration(name, w, "size")
        if not size:
            raise StoreDefinitionError(name, "window.size must be a positive duration")
        advance = _duration(name, w, "advance", size)
        if not advance or advance > size or size % advance:
            raise StoreDefinitionError(name, f"window.advance must divide window.size ({size} ms), got {advance}")
        grace = _duration(name, w, "grace", 0) or 0
        retention = _duration(name, w, "retention", "24h") or 0
        if retention < size + grace:
            raise StoreDefinitionError(name, "window.retention must be at least size + grace (as in Kafka Streams)")
        return WindowSpec(size, advance, grace, retention), None
    s = _require(name, raw, "session")
    gap = _duration(name, s, "gap")
    if not gap:
        raise StoreDefinitionError(name, "session.gap must be a positive duration")
    grace = _duration(name, s, "grace", 0) or 0
    retention = _duration(name, s, "retention", "24h") or 0
    if retention < gap + grace:
        raise StoreDefinitionError(name, "session.retention must be at least gap + grace (as in Kafka Streams)")
    return None, SessionSpec(gap, grace, retention)


def _tombstone_rule(name: str, raw: Any, props: dict[str, Any]) -> TombstoneRule:
    """'null_value', or {field: F, equals: V} (a null value still deletes too)."""
    if raw in ("null_value", None):
        return TombstoneRule()
    if isinstance(raw, dict) and set(raw) <= {"field", "equals", "null_value"}:
        field, equals = raw.get("field"), raw.get("equals")
        if field not in props or props[field].get("type") != "string" or not isinstance(equals, str):
            raise StoreDefinitionError(name, f"tombstone: field {field!r} must be a string event field and equals a string")
        return TombstoneRule(bool(raw.get("null_value", True)), field, equals)
    raise StoreDefinitionError(name, f"tombstone must be 'null_value' or {{field, equals}}, got {raw!r}")
