"""Classifying one source record in Python, by the rules ingest/decode.py applies in Spark.

Reads at `consistency=latest` fold records the stream has not committed yet, and must not apply a
record the engine would dead-letter. This module gives the same verdict, and the same reason
category, for one record: a missing key, an oversized value, unparseable JSON (strict: no invalid
UTF-8, NaN or trailing text), not an object, a required field missing or null, a field of the wrong
JSON type or out of the 64-bit range, a bound (minimum, exclusiveMinimum, maximum, minLength,
enum) broken, and a Kafka key other than the key field. Fields are checked in the event schema's
order, each completely before the next, as decode.classify does.
"""

from __future__ import annotations

import json
from typing import Any

from deltastate.stores.definition import StoreDefinition

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _kind_ok(value: Any, json_type: str) -> bool:
    if json_type == "integer":
        return type(value) is int
    if json_type == "number":
        return type(value) in (int, float)
    if json_type == "string":
        return type(value) is str
    if json_type == "boolean":
        return type(value) is bool
    raise ValueError(f"unsupported JSON-schema type {json_type!r}")


def _in_range(value: Any, json_type: str) -> bool:
    if json_type == "integer":
        return INT64_MIN <= value <= INT64_MAX
    if json_type == "number":
        return abs(float(value)) != float("inf")
    return True


def _field_reason(name: str, spec: dict[str, Any], doc: dict[str, Any], required: bool) -> str | None:
    json_type = spec.get("type", "string")
    if isinstance(doc.get(name), str) and _has_lone_surrogate(doc[name]):
        doc = {k: v for k, v in doc.items() if k != name}
    if name not in doc:
        return f"schema: field '{name}' missing" if required else None
    value = doc[name]
    if value is None:
        return f"schema: field '{name}' is null" if required else None
    if not _kind_ok(value, json_type):
        return f"schema: field '{name}' must be {json_type}"
    if not _in_range(value, json_type):
        return f"schema: field '{name}' out of range for {json_type}"
    if "minimum" in spec and value < spec["minimum"]:
        return f"schema: field '{name}' must be >= {spec['minimum']}"
    if "exclusiveMinimum" in spec and value <= spec["exclusiveMinimum"]:
        return f"schema: field '{name}' must be > {spec['exclusiveMinimum']}"
    if "maximum" in spec and value > spec["maximum"]:
        return f"schema: field '{name}' must be <= {spec['maximum']}"
    if "minLength" in spec and len(value) < spec["minLength"]:
        return f"schema: field '{name}' shorter than {spec['minLength']}"
    if "enum" in spec and value not in spec["enum"]:
        return f"schema: field '{name}' not one of {spec['enum']}"
    return None


_DECODER = json.JSONDecoder(parse_constant=_refuse_constant)
_WHITESPACE = " \t\n\r"


def parse_event(value: bytes) -> Any:
    """The record's JSON value, read as the engine reads it; ValueError when it is not JSON.

    Strict JSON (no NaN, Infinity, single quotes or comments, valid UTF-8), with the engine's reading
    of text after the first value: Spark's JSON readers stop after it, so trailing text is refused
    only when the whole value does not end in '}'."""
    text = value.decode("utf-8").strip(_WHITESPACE)
    doc, end = _DECODER.raw_decode(text)
    if end != len(text) and not text.endswith("}"):
        raise ValueError("text after the JSON value")
    return doc


def _has_lone_surrogate(value: str) -> bool:
    """Spark's variant parser refuses a lone surrogate escape (\\ud800), reading the field as missing."""
    return any("\ud800" <= ch <= "\udfff" for ch in value)


def record_reason(key: bytes | None, value: bytes | None, store: StoreDefinition,
                  max_value_bytes: int) -> str | None:
    """Why the engine would dead-letter the record; None when it applies it (an event, or a keyed
    tombstone)."""
    if key is None:
        return "missing_key: the Kafka key is null"
    if value is None:
        return None
    if len(value) > max_value_bytes:
        return f"oversized: {len(value)} bytes > limit {max_value_bytes}"
    try:
        doc = parse_event(value)
    except (UnicodeDecodeError, ValueError):
        return "unparseable_json"
    if not isinstance(doc, dict):
        return "schema: not a JSON object"
    required = set(store.source.required)
    for name, spec in store.source.properties.items():
        reason = _field_reason(name, spec, doc, name in required)
        if reason is not None:
            return reason
    key_str = key.decode("utf-8", errors="replace")
    if doc.get(store.key_field) != key_str:
        return f"key_mismatch: kafka key '{key_str}' != {store.key_field} '{doc.get(store.key_field)}'"
    return None
