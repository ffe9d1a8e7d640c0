"""Suite specs from schemas/quality/*.json, expanded for one store into plain expectation configs.

Why a spec of our own around GX's expectation configs: one suite serves every store, so a spec
names store-dependent things symbolically and this module fills them in from the store definition:
  "for_each": required_fields | key_columns | count_columns   repeat with {field} substituted
  "when": windowed | key_value                                only for window/session stores, or only not
  "$name" values                                              taken from the caller's values
  "{event_time_field}" / "{key_field}"                        from the store definition
Pure functions (no GX import) so they are cheap to test and to call at DAG parse time.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deltastate.changelog.layout import store_key_columns
from deltastate.config import Settings
from deltastate.errors import ConfigError
from deltastate.stores.backends import FAMILIES, backend_of
from deltastate.stores.definition import StoreDefinition

SUITES = ("events", "changelog", "snapshot")


@dataclass(frozen=True)
class Expectation:
    type: str
    kwargs: dict[str, Any]


@dataclass(frozen=True)
class SuiteSpec:
    suite: str
    description: str
    expectations: tuple[dict[str, Any], ...]


def suite_path(settings: Settings, suite: str) -> Path:
    return settings.schemas_dir / "quality" / f"{suite}.json"


def load_spec(settings: Settings, suite: str) -> SuiteSpec:
    path = suite_path(settings, suite)
    try:
        raw = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"quality suite {suite!r}: cannot read {path}: {exc}") from exc
    if raw.get("suite") != suite or not isinstance(raw.get("expectations"), list):
        raise ConfigError(f"quality suite {suite!r}: {path} must hold 'suite': {suite!r} and an 'expectations' list")
    return SuiteSpec(suite, raw.get("description", ""), tuple(raw["expectations"]))


def count_columns(store: StoreDefinition) -> tuple[str, ...]:
    """Value fields that count events: they can never be negative."""
    return tuple(a.target for a in store.aggregations if a.op == "count")


def _lists(store: StoreDefinition) -> dict[str, tuple[str, ...]]:
    return {"required_fields": tuple(store.source.required), "key_columns": store_key_columns(store),
            "count_columns": count_columns(store)}


def _fill(value: Any, store: StoreDefinition, values: dict[str, Any], field: str | None) -> Any:
    if isinstance(value, dict):
        return {k: _fill(v, store, values, field) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, store, values, field) for v in value]
    if not isinstance(value, str):
        return value
    if value.startswith("$"):
        name = value[1:]
        if name in values:
            return values[name]
        if name in _lists(store):
            return list(_lists(store)[name])
        raise ConfigError(f"store {store.name!r}: quality value {value!r} was not supplied")
    return value.replace("{field}", field or "").replace("{event_time_field}", store.event_time_field) \
        .replace("{key_field}", store.key_field)


def expand(spec: SuiteSpec, store: StoreDefinition, values: dict[str, Any] | None = None) -> list[Expectation]:
    """The spec's expectations for one store, in spec order."""
    values = values or {}
    family = backend_of(store).family  # what "when" names: windowed or key_value
    out: list[Expectation] = []
    for item in spec.expectations:
        when = item.get("when")
        if when is not None and when not in FAMILIES:
            raise ConfigError(f"quality suite {spec.suite!r}: unknown 'when': {when!r}")
        if when is not None and when != family:
            continue
        each = item.get("for_each")
        if each is not None and each not in _lists(store):
            raise ConfigError(f"quality suite {spec.suite!r}: unknown 'for_each': {each!r}")
        for field in (_lists(store)[each] if each else (None,)):
            out.append(Expectation(item["type"], _fill(item.get("kwargs", {}), store, values, field)))
    return out
