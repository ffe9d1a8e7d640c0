"""Decoding and validation of source records as native Spark expressions (no Python per record).

Each Kafka record gets a `reason`: null when it can be applied, else why it goes to the dead-letter
table. Checks follow the event's JSON schema: required fields, JSON types (integer is not number is
not string), minimum / exclusiveMinimum / maximum / minLength / enum, and the Kafka key must equal
the key field. A null value is a tombstone and only needs a key.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from deltastate.stores.definition import StoreDefinition

# schema_of_variant() names for each JSON-schema type.
_INTEGER_TYPES = ("TINYINT", "SMALLINT", "INT", "BIGINT")
_SPARK_TYPE = {"integer": "bigint", "number": "double", "string": "string", "boolean": "boolean"}


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


def _field_checks(name: str, spec: dict[str, Any], required: bool) -> list[tuple[Column, Column]]:
    """(failed?, reason) pairs for one event field, in the order they are reported. They read the
    field's JSON kind (computed once per record) and its typed value from from_json, never the
    variant again: one projection holding every check stays small enough for the JIT."""
    kind = F.col(_kind_column(name))
    value = F.col(name)
    json_type = spec.get("type", "string")
    checks: list[tuple[Column, Column]] = []
    if required:
        checks.append((kind.isNull(), F.lit(f"schema: field '{name}' missing")))
        checks.append((kind == F.lit("VOID"), F.lit(f"schema: field '{name}' is null")))
    present = kind.isNotNull() & (kind != F.lit("VOID"))
    checks.append((present & ~_type_ok(kind, json_type),
                   F.concat(F.lit(f"schema: field '{name}' must be {json_type}, got "), F.lower(kind))))
    # Numbers too large for the typed column arrive as null with a valid kind.
    checks.append((present & value.isNull(), F.lit(f"schema: field '{name}' out of range for {json_type}")))
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


def classify(records: DataFrame, store: StoreDefinition, max_value_bytes: int) -> DataFrame:
    """Kafka records -> records with key_str, is_tombstone, reason and one typed column per event field.

    One JSON parse: from_json with every field typed VARIANT keeps each field's JSON kind (so a
    number is not taken for a string, and a missing field differs from a JSON null); the typed
    values are casts of those small variants. Only a record with none of the fields is parsed again,
    to tell unparseable JSON from a JSON value that is not an object."""
    props = store.source.properties
    required = set(store.source.required)
    key_field = store.key_field
    small = F.col("value_size") <= max_value_bytes
    df = records.select(
        "topic", "partition", "offset", F.col("timestamp").alias("kafka_timestamp"), "key", "value",
        F.col("key").cast("string").alias("key_str"),
        F.octet_length("value").alias("value_size"),
        F.col("value").isNull().alias("is_tombstone"),
    )
    variant_schema = ", ".join(f"`{n}` variant" for n in props)
    df = df.select("*", F.when(small, F.from_json(F.col("value").cast("string"), variant_schema)).alias("j"))
    df = df.select(
        "*",
        *[F.expr(f"schema_of_variant(j.`{n}`)").alias(_kind_column(n)) for n in props],
        *[F.expr(f"try_cast(j.`{n}` as {_SPARK_TYPE[s.get('type', 'string')]})").alias(n) for n, s in props.items()],
    )
    no_field = F.lit(True)
    for n in props:
        no_field = no_field & F.col(_kind_column(n)).isNull()
    reparsed = F.expr("try_parse_json(cast(value as string))")
    checks: list[tuple[Column, Column]] = [
        (F.col("key").isNull(), F.lit("missing_key: the Kafka key is null")),
        (F.col("is_tombstone"), F.lit(None).cast("string")),  # a keyed tombstone is valid
        (~small, F.concat(F.lit("oversized: "), F.col("value_size").cast("string"), F.lit(f" bytes > limit {max_value_bytes}"))),
        (no_field & reparsed.isNull(), F.lit("unparseable_json")),
        (no_field & ~F.expr("schema_of_variant(try_parse_json(cast(value as string)))").startswith("OBJECT"),
         F.lit("schema: not a JSON object")),
    ]
    for name, spec in props.items():
        checks.extend(_field_checks(name, spec, name in required))
    key_value = F.col(key_field)
    checks.append((key_value != F.col("key_str"),
                   F.concat(F.lit("key_mismatch: kafka key '"), F.col("key_str"), F.lit(f"' != {key_field} '"), key_value, F.lit("'"))))
    reason = F.when(checks[0][0], checks[0][1])
    for failed, reason_text in checks[1:]:
        reason = reason.when(failed, reason_text)
    return (df.select("*", reason.otherwise(F.lit(None).cast("string")).alias("reason"))
            .drop("j", *[_kind_column(n) for n in props]))
