"""A store's value schema versions: version N's definition built from version N-1's and the
`migrations:` entry that says how N is obtained (rename, widen, drop, derive, add an aggregation),
with every change a migration cannot make refused by name.

The rules of what a version may change live here once; the migration commands (deltastate/migration)
and the reads pinned to an older version (`down_convert`) follow them.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from deltastate.errors import StoreDefinitionError
from deltastate.stores.definition import VALUE_TYPES, Aggregation, DerivedField, MigrationStep, StoreDefinition, ValueField
from deltastate.stores.expression import ExpressionError, field_names, parse
from deltastate.stores.schema import AggregationModel, MigrationModel

# Widening a value type keeps every value exact; the reverse would not.
WIDENINGS = {("long", "double")}


def value_fields_of(store: str, schemas_dir: Path, schema_name: str) -> tuple[int, tuple[ValueField, ...]]:
    path = schemas_dir / "values" / f"{schema_name}.json"
    if not path.is_file():
        raise StoreDefinitionError(store, f"schema file {path} does not exist")
    schema = json.loads(path.read_text())
    fields = []
    for f in schema.get("fields", []):
        if f.get("type") not in VALUE_TYPES:
            raise StoreDefinitionError(store, f"{schema_name}: value field {f.get('name')!r} has unsupported type "
                                              f"{f.get('type')!r}")
        fields.append(ValueField(f["name"], f["type"]))
    return int(schema.get("version", 1)), tuple(fields)


AggregationCheck = Callable[[str, AggregationModel, tuple[ValueField, ...], str], Aggregation]


def next_version(prev: StoreDefinition, m: MigrationModel, schemas_dir: Path,
                 check_aggregation: AggregationCheck) -> StoreDefinition:
    """Version m.version of the store, from `prev` (its version m.version - 1)."""
    name = prev.name

    def refuse(problem: str) -> StoreDefinitionError:
        return StoreDefinitionError(name, f"migrations: version {m.version}: {problem}")

    version, fields = value_fields_of(name, schemas_dir, m.value_schema)
    if version != m.version:
        raise refuse(f"value schema {m.value_schema} declares version {version}, not {m.version}")
    new_types = {f.name: f.type for f in fields}
    old = {f.name: f.type for f in prev.value_fields}
    for source in [*m.rename, *m.drop]:
        if source not in old:
            raise refuse(f"{source!r} is not a value field of version {prev.value_version} "
                         f"(fields: {', '.join(old)})")
    for dropped in m.drop:
        if dropped in m.rename:
            raise refuse(f"{dropped!r} is both renamed and dropped")
        if dropped == prev.leaderboard_default_by:
            raise refuse(f"{dropped!r} is leaderboard.default_by; it cannot be dropped")
    carried = {m.rename.get(f, f): f for f in old if f not in m.drop}  # new name -> old name
    widened = []
    for new_name, old_name in carried.items():
        if new_name not in new_types:
            raise refuse(f"value field {old_name!r} is neither in {m.value_schema} nor dropped "
                         f"(rename it, or list it under drop)")
        before, after = old[old_name], new_types[new_name]
        if before != after:
            if (before, after) not in WIDENINGS:
                raise refuse(f"{old_name!r} changes type {before} -> {after}; only long -> double widens exactly")
            widened.append((new_name, before, after))
    added = {t: check_aggregation(t, spec, fields, m.value_schema) for t, spec in m.aggregations.items()}
    clash = set(added) & set(carried) | set(m.derive) & (set(carried) | set(added))
    if clash:
        raise refuse(f"{sorted(clash)} already exist in version {m.version}; a field has one source")
    aggregations = tuple(dataclasses.replace(a, target=m.rename.get(a.target, a.target))
                         for a in prev.aggregations if a.target not in m.drop) + tuple(added.values())
    aggregated = {a.target for a in aggregations}
    derived = []
    for d in prev.derived:
        if d.target in m.drop:
            continue
        touched = field_names(parse(d.expression)) & (set(m.rename) | set(m.drop))
        if touched:
            raise refuse(f"derived field {d.target!r} reads {sorted(touched)}, which this version renames or drops; "
                         "derive it again under a new name")
        derived.append(DerivedField(m.rename.get(d.target, d.target), d.expression))
    for target, text in m.derive.items():
        if target not in new_types:
            raise refuse(f"derived field {target!r} is not in {m.value_schema}")
        if new_types[target] == "string":
            raise refuse(f"derived field {target!r} must be numeric")
        try:
            reads = field_names(parse(text))
        except ExpressionError as e:
            raise refuse(f"derive.{target}: {e}") from None
        unknown = reads - aggregated
        if unknown:
            raise refuse(f"derive.{target} reads {sorted(unknown)}, not aggregated fields of version {m.version} "
                         f"(aggregated: {', '.join(sorted(aggregated))})")
        derived.append(DerivedField(target, text))
    sourced = aggregated | {d.target for d in derived}
    missing = [f for f in new_types if f not in sourced]
    if missing:
        raise refuse(f"value fields {missing} of {m.value_schema} have no source: rename, derive or aggregate them")
    for target, value in m.defaults.items():
        _check_default(refuse, target, new_types[target], value)
    step = MigrationStep(
        version=m.version, renamed=tuple(m.rename.items()), derived=tuple(m.derive), added=tuple(m.aggregations),
        defaults=tuple(m.defaults.items()), dropped=tuple(m.drop), widened=tuple(widened),
        retire_after_ms=m.retire_after)
    return dataclasses.replace(
        prev, value_schema_name=m.value_schema, value_version=m.version, value_fields=fields,
        aggregations=aggregations, derived=tuple(derived),
        leaderboard_default_by=m.rename.get(prev.leaderboard_default_by, prev.leaderboard_default_by)
        if prev.leaderboard_default_by else None,
        history=(*prev.history, step))


def _check_default(refuse: Callable[[str], StoreDefinitionError], target: str, type_: str, value: Any) -> None:
    ok = isinstance(value, str) if type_ == "string" else (
        isinstance(value, int) if type_ == "long" else isinstance(value, (int, float)))
    if not ok or isinstance(value, bool):
        raise refuse(f"defaults.{target}: {value!r} is not a {type_}")


def down_convert(store: StoreDefinition, value: dict[str, Any], to_version: int) -> dict[str, Any]:
    """A row of `store`'s version in the shape of an older version, its order kept: renamed fields
    under their old names, fields added since absent, widened numbers narrowed back when exact.
    Fields a later version dropped stay absent: no version after the drop keeps them. Other keys
    (the store key, bookkeeping columns) pass through."""
    check_servable(store, to_version)
    out = dict(value)
    for step in reversed(store.history):
        if step.version <= to_version:
            break
        removed = {*step.added, *step.derived}
        old_name = {new: old for old, new in step.renamed}
        narrowed = {f for f, before, _after in step.widened if before == "long"}
        shaped: dict[str, Any] = {}
        for name, item in out.items():
            if name in removed:
                continue
            if name in narrowed and isinstance(item, float) and item.is_integer():
                item = int(item)
            shaped[old_name.get(name, name)] = item
        out = shaped
    return out


def check_servable(store: StoreDefinition, version: int) -> None:
    served = [v for v in store.versions if v <= store.value_version]
    if version not in served:
        raise ValueError(f"store {store.name!r} serves value schema versions {served} (current "
                         f"{store.value_version}), not {version}")
