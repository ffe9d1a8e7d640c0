"""Parses and checks one store definition file (schemas/stores/NAME.yaml) with the event and value
schemas it names, and refuses a definition that would fail later (unknown key, wrong type, unknown op,
missing field, type mismatch) with a message naming the file, the key path and what is allowed.

This is the only module that needs pydantic and PyYAML; loader.py calls it when its cache of checked
definitions has no entry for the files as they are now."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from deltastate.errors import StoreDefinitionError
from deltastate.stores.backends.base import KEY_VALUE
from deltastate.stores.backends.registry import type_backend
from deltastate.stores.current import FIRST_VERSION
from deltastate.stores.definition import (
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
from deltastate.stores.schema import AggregationModel, FieldTombstoneModel, StoreFileModel
from deltastate.stores.state import DEFAULT_STATE
from deltastate.stores.validation import explain
from deltastate.stores.versions import next_version

# JSON-schema types an aggregation may read, per value type it produces.
_NUMERIC_JSON = {"integer": "long", "number": "double"}

# libyaml's safe loader when PyYAML was built with it: the same documents, parsed several times faster.
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def parse_store(schemas_dir: Path, name: str, path: Path, version: int | None = None) -> StoreDefinition:
    """The definition in `path` at value schema `version` (default: the first), checked against the
    file shape, the schemas it names and, for a later version, the migrations that lead to it."""
    try:
        raw = yaml.load(path.read_text(), Loader=_YAML_LOADER)
    except yaml.YAMLError as e:
        raise StoreDefinitionError(name, f"{path}: not valid YAML: {e}") from None
    if not isinstance(raw, dict):
        raise StoreDefinitionError(name, f"{path}: expected a mapping of settings, got {type(raw).__name__}")
    try:
        model = StoreFileModel.model_validate(raw)
    except ValidationError as e:
        raise StoreDefinitionError(name, f"{path}:\n{explain(e, StoreFileModel)}") from None
    if model.name not in (None, name):
        raise StoreDefinitionError(name, f"{path}: name: the file declares {model.name!r}; a store's name is "
                                         f"its file name ({name!r})")
    if version == FIRST_VERSION:
        version = None
    try:
        store = _build(schemas_dir, name, model)
        store = dataclasses.replace(store, versions=(store.value_version, *(m.version for m in model.migrations)))
        if model.migrations and model.migrations[0].version != store.value_version + 1:
            raise StoreDefinitionError(name, f"migrations: the first migration produces version "
                                             f"{model.migrations[0].version}; the store's value schema is version "
                                             f"{store.value_version}")
        if version is not None and version not in store.versions:
            raise StoreDefinitionError(name, f"no value schema version {version}; declared versions: "
                                             f"{list(store.versions)}")
        for m in model.migrations:
            if version is None or m.version > version:
                break
            store = next_version(store, m, schemas_dir, _checker(store))
        return store
    except StoreDefinitionError as e:
        raise StoreDefinitionError(name, f"{path}: {e.problem}") from None


def _checker(store: StoreDefinition):
    """The aggregation rules of this file, for the aggregations a migration adds."""
    def check(target: str, spec: AggregationModel, fields: tuple[ValueField, ...], value_schema: str) -> Aggregation:
        return _aggregation(store.name, store.type, target, spec, store.source.properties, fields,
                            store.source.event_schema_name, value_schema)
    return check


def _load_json(store: str, path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise StoreDefinitionError(store, f"schema file {path} does not exist")
    return json.loads(path.read_text())


def _build(schemas_dir: Path, name: str, model: StoreFileModel) -> StoreDefinition:
    src = model.source
    event_schema = _load_json(name, schemas_dir / "events" / f"{src.event_schema}.json")
    source = SourceSpec(topic=src.topic, partitions=src.partitions, key_field=src.key_field,
                        event_schema_name=src.event_schema, event_schema=event_schema)
    props = source.properties
    if source.key_field not in props or props[source.key_field].get("type") != "string":
        raise StoreDefinitionError(name, f"key field {source.key_field!r} must be a string property of {src.event_schema}")

    value_schema_name = model.value.schema_name
    value_schema = _load_json(name, schemas_dir / "values" / f"{value_schema_name}.json")
    fields = []
    for f in value_schema.get("fields", []):
        if f.get("type") not in VALUE_TYPES:
            raise StoreDefinitionError(name, f"value field {f.get('name')!r} has unsupported type {f.get('type')!r}")
        fields.append(ValueField(f["name"], f["type"]))
    value_fields = tuple(fields)
    field_names = {f.name for f in value_fields}
    aggregations = tuple(_aggregation(name, model.type, target, spec, props, value_fields, src.event_schema,
                                      value_schema_name)
                         for target, spec in model.aggregations.items())
    missing = field_names - {a.target for a in aggregations}
    if missing:
        raise StoreDefinitionError(name, f"value fields without an aggregation: {', '.join(sorted(missing))}")

    event_time_field = model.event_time_field
    if event_time_field not in props or props[event_time_field].get("type") != "integer":
        raise StoreDefinitionError(name, f"event_time_field {event_time_field!r} must be an integer (epoch ms) field")
    # Windows, sessions and stream time need a time on every event; the schema must make a missing
    # or negative one a dead letter, or it would reach the engine (a stuck batch, or a lost record).
    if event_time_field not in source.required or not props[event_time_field].get("minimum", -1) >= 0:
        raise StoreDefinitionError(
            name, f"event_time_field {event_time_field!r} must be required by {src.event_schema} and have "
                  f"\"minimum\": 0 (got required={list(source.required)}, "
                  f"minimum={props[event_time_field].get('minimum')})")
    leaderboard_by = model.leaderboard.default_by
    if leaderboard_by is not None and leaderboard_by not in field_names:
        raise StoreDefinitionError(name, f"leaderboard.default_by {leaderboard_by!r} is not a value field "
                                         f"(value fields: {', '.join(sorted(field_names))})")
    if leaderboard_by is not None and leaderboard_by not in {f.name for f in value_fields if f.type != "string"}:
        raise StoreDefinitionError(name, f"leaderboard.default_by {leaderboard_by!r} must be a numeric value field")
    cl = model.changelog
    return StoreDefinition(
        name=name,
        type=model.type,
        description=model.description,
        source=source,
        value_schema_name=value_schema_name,
        value_version=int(value_schema.get("version", 1)),
        value_fields=value_fields,
        aggregations=aggregations,
        event_time_field=event_time_field,
        tombstone="field" if isinstance(model.tombstone, FieldTombstoneModel) else "null_value",
        changelog=ChangelogOptions(cl.min_compaction_lag, cl.min_cleanable_dirty_ratio, cl.delete_retention,
                                   cl.enabled),
        state=DEFAULT_STATE if model.state is None else model.state.settings(),
        leaderboard_default_by=leaderboard_by,
        ttl_ms=model.ttl,
        max_entries=model.max_entries,
        window=None if model.window is None else WindowSpec(
            model.window.size, model.window.advance or model.window.size, model.window.grace, model.window.retention),
        session=None if model.session is None else SessionSpec(
            model.session.gap, model.session.grace, model.session.retention),
        tombstone_rule=_tombstone_rule(name, model.tombstone, props),
    )


def _aggregation(name: str, store_type: str, target: str, spec: AggregationModel, props: dict[str, Any],
                 value_fields: tuple[ValueField, ...], event_schema: str, value_schema: str) -> Aggregation:
    op, source_field = spec.op, spec.field
    backend = type_backend(store_type)
    if op in WINDOWED_ONLY_OPS and backend is not None and backend.family == KEY_VALUE:
        raise StoreDefinitionError(name, f"aggregation {target!r}: op {op!r} is only available to window and session stores")
    wanted = next((f.type for f in value_fields if f.name == target), None)
    if wanted is None:
        raise StoreDefinitionError(name, f"aggregation {target!r} is not a field of value schema {value_schema} "
                                         f"(fields: {', '.join(f.name for f in value_fields)})")
    if op != "count":
        if source_field not in props:
            raise StoreDefinitionError(name, f"aggregation {target!r} reads {source_field!r}, not a field of "
                                             f"{event_schema} (fields: {', '.join(sorted(props))})")
        json_type = props[source_field].get("type")
        produced = _NUMERIC_JSON.get(json_type, "string" if json_type == "string" else None)
        if op == "avg":
            produced = "double" if produced in ("long", "double") else produced
        if op in ("sum", "avg") and produced == "string":
            raise StoreDefinitionError(name, f"aggregation {target!r}: {op} needs a numeric field, {source_field!r} is a string")
        if produced != wanted and not (op in ("min", "max", "last") and produced == "long" and wanted == "double"):
            raise StoreDefinitionError(name, f"aggregation {target!r}: {op}({source_field}) gives {produced}, value field is {wanted}")
    return Aggregation(target, op, source_field)


def _tombstone_rule(name: str, rule: str | FieldTombstoneModel, props: dict[str, Any]) -> TombstoneRule:
    """'null_value', or {field: F, equals: V} (a null value still deletes too, unless null_value: false)."""
    if not isinstance(rule, FieldTombstoneModel):
        return TombstoneRule()
    if rule.field not in props or props[rule.field].get("type") != "string":
        raise StoreDefinitionError(name, f"tombstone.field {rule.field!r} must be a string event field")
    return TombstoneRule(rule.null_value, rule.field, rule.equals)
