"""Decoding and validation of source records as native Spark expressions (no Python per record).

Each Kafka record gets a `reason`: null when it can be applied, else why it goes to the dead-letter
table. Checks follow the event's JSON schema: required fields, JSON types (integer is not number is
not string), minimum / exclusiveMinimum / maximum / minLength / enum, and the Kafka key must equal
the key field. A null value is a tombstone and only needs a key.

JSON is read strictly: invalid UTF-8, single quotes, NaN or Infinity, and text after the object are
unparseable. Known gaps: Spark's JSON readers stop after the first complete value, so an object
followed by text that itself ends in '}' (such as a second object) reads as the first object; a
string holding a lone surrogate escape (\\ud800) makes its field read as missing. Duplicate field
names keep the last value, as Python's json module does.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from deltastate.stores.definition import StoreDefinition

# schema_of_variant() names for each JSON-schema type.
_INTEGER_TYPES = ("TINYINT", "SMALLINT", "INT", "BIGINT")
_SPARK_TYPE = {"integer": "bigint", "number": "double", "string": "string", "boolean": "boolean"}
# The typed read's column type for each JSON-schema type (jvm/src/io/deltastate/JsonFields.java).
_FIELD_TYPE = {"integer": "long", "number": "double", "string": "string", "boolean": "boolean"}
# Jackson's lenient defaults would let the variant parse accept what JSON does not ('x', NaN).
_STRICT_JSON = {"allowSingleQuotes": "false", "allowNonNumericNumbers": "false"}


def _type_ok(kind: Column, json_type: str) -> Column:
    if json_type == "integer":
        return kind.isin(*_INTEGER_TYPES)
    if json_type == "number":
        return kind.isin(*_INTEGER_TYPES, "DOUBLE", "FLOAT") | kind.startswith("DECIMAL")
    if json_type == "string":
        return kind == F.lit("STRING")
    if json_type == "boolean":
        return kind == F.lit("BOOLEAN")
    raise ValueError(f"unsupported JSON-schema type {json_type!r}")


def _kind_column(name: str) -> str:
    return f"__kind_{name}"


def _structure_checks(name: str, spec: dict[str, Any], required: bool) -> list[tuple[Column, Column]]:
    """(failed?, reason) pairs for one field's presence and JSON type, read from the field's JSON
    kind (computed once per record from the variant parse) and its value cast from the variant."""
    kind = F.col(_kind_column(name))
    json_type = spec.get("type", "string")
    checks: list[tuple[Column, Column]] = []
    if required:
        checks.append((kind.isNull(), F.lit(f"schema: field '{name}' missing")))
        checks.append((kind == F.lit("VOID"), F.lit(f"schema: field '{name}' is null")))
    present = _present(name)
    checks.append((present & ~_type_ok(kind, json_type),
                   F.concat(F.lit(f"schema: field '{name}' must be {json_type}, got "), F.lower(kind))))
    # Numbers too large for the typed column arrive as null with a valid kind.
    checks.append((present & F.col(name).isNull(), F.lit(f"schema: field '{name}' out of range for {json_type}")))
    return checks


def _present(name: str) -> Column:
    kind = F.col(_kind_column(name))
    return kind.isNotNull() & (kind != F.lit("VOID"))


def _value_checks(name: str, spec: dict[str, Any], present: Column) -> list[tuple[Column, Column]]:
    """(failed?, reason) pairs for the bounds of one field's typed value, in the order reported."""
    value = F.col(name)
    checks: list[tuple[Column, Column]] = []
    if "minimum" in spec:
        checks.append((present & (value < F.lit(spec["minimum"])), F.lit(f"schema: field '{name}' must be >= {spec['minimum']}")))
    if "exclusiveMinimum" in spec:
        checks.append((present & (value <= F.lit(spec["exclusiveMinimum"])), F.lit(f"schema: field '{name}' must be > {spec['exclusiveMinimum']}")))
    if "maximum" in spec:
        checks.append((present & (value > F.lit(spec["maximum"])), F.lit(f"schema: field '{name}' must be <= {spec['maximum']}")))
    if "minLength" in spec:
        checks.append((present & (F.length(value) < F.lit(spec["minLength"])), F.lit(f"schema: field '{name}' shorter than {spec['minLength']}")))
    if "enum" in spec:
        checks.append((present & ~value.isin(*spec["enum"]), F.lit(f"schema: field '{name}' not one of {spec['enum']}")))
    return checks


def _typed_field_ok(name: str, required: bool) -> Column:
    """True when the typed read proves the field present (if required): the read is a struct only
    when every declared field is absent, JSON null or of its JSON kind, so a null column is a field
    absent or null, which only a required field must not be."""
    return F.col(f"__typed.`{name}`").isNotNull() if required else F.lit(True)


def _typed_fields(records: DataFrame, store: StoreDefinition) -> str:
    """Registers the store's typed read of its event fields (JsonFields.java) on the session; its
    SQL name, one per field list, so the versions of a store under migration each get their own."""
    props = store.source.properties
    names = list(props)
    types = [_FIELD_TYPE[spec.get("type", "string")] for spec in props.values()]
    name = "deltastate_json_fields_" + hashlib.sha1(json.dumps([names, types]).encode()).hexdigest()[:12]
    spark = records.sparkSession
    spark._jvm.io.deltastate.Udafs.registerJsonFields(spark._jsparkSession, name, names, types)
    return name


def _valid_utf8() -> Column:
    """Both JSON parsers read bytes as UTF-8 and silently replace what is not; JSON refuses it."""
    return F.expr("is_valid_utf8(__text)")


def _first_failure(checks: list[tuple[Column, Column]]) -> Column:
    reason = F.when(checks[0][0], checks[0][1])
    for failed, reason_text in checks[1:]:
        reason = reason.when(failed, reason_text)
    return reason.otherwise(F.lit(None).cast("string"))


def classify(records: DataFrame, store: StoreDefinition, max_value_bytes: int,
             typed_path: bool = True) -> DataFrame:
    """Kafka records -> records with key_str, is_tombstone, reason and one typed column per event field.

    A typed read of the record's bytes (JsonFields.java) vouches for most records cheaply
    (_typed_field_ok). Every other record (a tombstone, an oversized value, a field missing, null,
    given twice or of another JSON kind, a \\u escape, bytes that are not UTF-8) is parsed again
    with every field typed VARIANT, which keeps each field's JSON kind (a number is not taken for a
    string, a missing field differs from a JSON null); its typed values are then casts of those
    small variants. Only a record with none of the fields is parsed a third time, to tell
    unparseable JSON from a JSON value that is not an object.
    Both paths report the same reasons: the typed one can only say "well-formed", and then both
    check the same bounds in the same order. typed_path=False sends every record down the variant
    path (tests compare the two).

    Filter on `reason` only over a cached or streamed-through frame: a filter placed straight on
    this plan is pushed below its projections and repeats the JSON parses once per reference
    (engine.keyvalue.audit.reread_dead_letters caches first, for that reason)."""
    props = store.source.properties
    required = set(store.source.required)
    key_field = store.key_field
    small = F.col("value_size") <= max_value_bytes
    df = records.select(
        "topic", "partition", "offset", F.col("timestamp").alias("kafka_timestamp"), "key", "value",
        F.col("key").cast("string").alias("key_str"),
        F.octet_length("value").alias("value_size"),
        F.col("value").isNull().alias("is_tombstone"),
        F.col("value").cast("string").alias("__text"),
    )
    df = df.select("*", F.when(small, F.expr(f"{_typed_fields(records, store)}(value)")).alias("__typed"))
    # The typed read gives null for escapes (\u: the variant parser refuses a lone surrogate) and
    # for bytes that are not UTF-8, so those go the variant way, which checks them itself.
    fast = F.col("key").isNotNull() & small & F.lit(typed_path) & F.col("__typed").isNotNull()
    for name in props:
        fast = fast & _typed_field_ok(name, name in required)
    df = df.select("*", F.coalesce(fast, F.lit(False)).alias("__fast"))
    variant_schema = ", ".join(f"`{n}` variant" for n in props)
    on_fast = F.col("__fast")
    df = df.select("*", F.when(~on_fast & small, F.from_json(F.col("__text"), variant_schema, _STRICT_JSON)).alias("j"))
    df = df.select(
        "*",
        *[F.expr(f"schema_of_variant(j.`{n}`)").alias(_kind_column(n)) for n in props],
        *[F.when(on_fast, F.col(f"__typed.`{n}`"))
          .otherwise(F.expr(f"try_cast(j.`{n}` as {_SPARK_TYPE[s.get('type', 'string')]})")).alias(n)
          for n, s in props.items()],
    )
    no_field = F.lit(True)
    for n in props:
        no_field = no_field & F.col(_kind_column(n)).isNull()
    reparsed = F.expr("try_parse_json(__text)")
    trimmed = F.expr("trim(BOTH ' \t\n\r' FROM __text)")
    unclosed = (((F.substring(trimmed, 1, 1) == F.lit("{")) & ~trimmed.endswith("}"))
                | ((F.substring(trimmed, 1, 1) == F.lit("[")) & ~trimmed.endswith("]")))
    key_mismatch = (F.col(key_field) != F.col("key_str"),
                    F.concat(F.lit("key_mismatch: kafka key '"), F.col("key_str"), F.lit(f"' != {key_field} '"),
                             F.col(key_field), F.lit("'")))
    slow: list[tuple[Column, Column]] = [
        (F.col("key").isNull(), F.lit("missing_key: the Kafka key is null")),
        (F.col("is_tombstone"), F.lit(None).cast("string")),  # a keyed tombstone is valid
        (~small, F.concat(F.lit("oversized: "), F.col("value_size").cast("string"), F.lit(f" bytes > limit {max_value_bytes}"))),
        (unclosed | ~_valid_utf8() | (no_field & reparsed.isNull()), F.lit("unparseable_json")),
        (no_field & ~F.expr("schema_of_variant(try_parse_json(__text))").startswith("OBJECT"),
         F.lit("schema: not a JSON object")),
    ]
    fast_checks: list[tuple[Column, Column]] = []
    for name, spec in props.items():
        slow.extend(_structure_checks(name, spec, name in required))
        slow.extend(_value_checks(name, spec, _present(name)))
        fast_checks.extend(_value_checks(name, spec, F.col(name).isNotNull()))
    reason = F.when(on_fast, _first_failure([*fast_checks, key_mismatch])).otherwise(_first_failure([*slow, key_mismatch]))
    return (df.select("*", reason.alias("reason"))
            .drop("__text", "__typed", "__fast", "j", *[_kind_column(n) for n in props]))
