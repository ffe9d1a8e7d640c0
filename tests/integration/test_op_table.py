"""Each aggregation op is declared once (deltastate/stores/ops.py) and every fold follows it: the same
seeded random input goes through the key-value engine's fold in the JVM (ResettableFold, given the
table's combines) and through the Python fold that `latest` reads and the LRU store use
(ops.combine), for every op the key-value engine takes and every value type the op allows, and the
results are compared per key. The input has nulls (absent values), tombstones and dead letters (no
position, tombstones or not). As in the engine, where a batch's partial follows the state's, each
key's records come as two partials of consecutive positions (an earlier and a later one, in two
Spark partitions, in position order within each), which Spark merges in either order. The fold's
state in a streaming checkpoint keeps the layout that checkpoints already written hold."""

from __future__ import annotations

import random
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType, DoubleType, LongType, StringType, StructField, StructType

from deltastate.stores.ops import OPS, combine, contribution, op

SPARK_TYPES = {"long": LongType(), "double": DoubleType(), "string": StringType()}
# The value types each op may write (stores/parse.py refuses the others).
TYPES = {"count": ("long",), "sum": ("long", "double"), "min": ("long", "double", "string"),
         "max": ("long", "double", "string"), "last": ("long", "double", "string")}
CASES = [(name, value_type) for name in OPS if not op(name).windowed_only for value_type in TYPES[name]]


def random_value(rng: random.Random, value_type: str) -> Any:
    if rng.random() < 0.15:
        return None  # an event without the field
    if value_type == "long":
        return rng.randint(-50, 50)
    if value_type == "double":
        return rng.randint(-400, 400) / 8  # exact in binary: sums do not depend on their order
    return rng.choice(["ant", "bee", "cat", "dog", "eel", "fox"])


Record = tuple[str, int | None, bool, Any, int]


def records(rng: random.Random, name: str, value_type: str) -> list[Record]:
    """(key, position or None for a dead letter, tombstone, the event's contribution, which partial)."""
    out = []
    for key in (f"k{i}" for i in range(40)):
        count = rng.randint(1, 30)
        cut = rng.randint(0, count)  # positions before the cut are the earlier partial
        for pos in range(count):
            kind, part = rng.random(), int(pos >= cut)
            if kind < 0.08:
                out.append((key, pos, True, None, part))
            elif kind < 0.14:  # a dead letter, tombstone or not: no position, so the fold ignores it
                out.append((key, None, rng.random() < 0.5, contribution(name, random_value(rng, value_type)), part))
            else:
                out.append((key, pos, False, contribution(name, random_value(rng, value_type)), part))
    return out


def python_fold(name: str, rows: list[Record]) -> dict[str, tuple[int, Any]]:
    """key -> (records since the last tombstone, the value), folded in position order by the table."""
    kind = op(name).combine
    out: dict[str, tuple[int, Any]] = {}
    for key, _pos, reset, value, _ in sorted((r for r in rows if r[1] is not None), key=lambda r: (r[0], r[1])):
        n, held = out.get(key, (0, None))
        out[key] = (0, None) if reset else (n + 1, combine(kind, held, value))
    return out


@pytest.mark.parametrize(("name", "value_type"), CASES)
def test_the_jvm_fold_and_the_python_fold_agree(spark: SparkSession, name: str, value_type: str) -> None:
    rng = random.Random(f"{name}-{value_type}")
    rows = records(rng, name, value_type)
    fold = f"op_table_fold_{name}_{value_type}"
    spark._jvm.io.deltastate.Udafs.registerFold(spark._jsparkSession, fold, op(name).combine, value_type)
    schema = StructType([StructField("key", StringType()), StructField("pos", LongType()),
                         StructField("reset", BooleanType()), StructField("v", SPARK_TYPES[value_type]),
                         StructField("part", LongType())])
    frame = spark.createDataFrame(rows, schema).repartition(2, "part").sortWithinPartitions("key", "pos")
    got = {r["key"]: (r["f"]["n"], r["f"]["r0"]) for r in
           frame.groupBy("key").agg(F.call_function(fold, "pos", "reset", "v").alias("f")).collect()}
    expected = python_fold(name, rows)
    # A key whose every record was a dead letter has no fold; Spark still groups it (n = 0, no value).
    assert {k: v for k, v in got.items() if k in expected} == expected
    assert all(v == (0, None) for k, v in got.items() if k not in expected)
    assert any(value is not None for _, value in expected.values())  # the input exercised the op


# The fold's buffer as a store's streaming checkpoint holds it: a store's next run reads the state
# its last run wrote, so this layout is a contract with every checkpoint already written.
CHECKPOINT_LAYOUT = [("first_pos", "bigint", True), ("last_pos", "bigint", True), ("reset_pos", "bigint", False),
                     ("n", "bigint", False), ("s0", "bigint", True), ("s1", "double", True), ("s2", "string", True)]


def test_the_fold_keeps_the_state_layout_of_existing_checkpoints(spark: SparkSession, tmp_path) -> None:
    fold = "op_table_fold_layout"
    spark._jvm.io.deltastate.Udafs.registerFold(spark._jsparkSession, fold, "add,max,latest", "long,double,string")
    schema = StructType([StructField("key", StringType()), StructField("pos", LongType()),
                         StructField("reset", BooleanType()), StructField("v", DoubleType()),
                         StructField("s", StringType())])
    rows = [(f"k{i % 3}", i, i == 4, i / 2, f"s{i}") for i in range(9)]
    spark.createDataFrame(rows, schema).write.parquet(str(tmp_path / "in"))
    folded = (spark.readStream.schema(schema).parquet(str(tmp_path / "in")).groupBy("key")
              .agg(F.call_function(fold, "pos", "reset", F.lit(1).cast("bigint"), "v", "s").alias("f")))
    seen = []
    query = (folded.writeStream.outputMode("update").trigger(availableNow=True)
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .foreachBatch(lambda batch, _: seen.extend(batch.collect())).start())
    query.awaitTermination()
    assert {r["key"]: r["f"]["n"] for r in seen} == {"k0": 3, "k1": 1, "k2": 3}  # k1's tombstone at 4
    state = spark.read.format("statestore").load(str(tmp_path / "checkpoint"))
    layout = [(f.name, f.dataType.simpleString(), f.nullable) for f in state.schema["value"].dataType.fields]
    assert layout == CHECKPOINT_LAYOUT
