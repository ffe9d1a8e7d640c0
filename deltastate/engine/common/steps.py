"""DataFrame steps whose columns reach the JVM once per run, for plans a micro-batch builds again.

PySpark hands a call's column list to the JVM one element at a time: a py4j round trip per column,
and one more per column given by name, each 0.5-0.8 ms on a loaded 2-core machine, paid again by
every micro-batch that builds the same plan over its own DataFrame. A step here converts its
columns when it is built; applying it is one round trip plus Spark's analysis of the step. The
columns name what they read (F.col), so one step applies to every batch's DataFrame.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import pyarrow as pa
from pyspark.rdd import PythonEvalType
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.classic.column import _to_java_column, _to_seq
from pyspark.sql.classic.dataframe import DataFrame as ClassicDataFrame

ColumnOrName = Column | str


def jvm_columns(spark: SparkSession, columns: Sequence[ColumnOrName]):
    """The columns as one JVM Seq[Column] (py4j round trips: one per column, and one per name)."""
    return _to_seq(spark.sparkContext, list(columns), _to_java_column)


class Select:
    """df.select(*columns), the columns converted once."""

    def __init__(self, spark: SparkSession, columns: Sequence[ColumnOrName]) -> None:
        if not columns:
            raise ValueError("a select needs at least one column")
        self._columns = jvm_columns(spark, columns)

    def __call__(self, df: DataFrame) -> DataFrame:
        return ClassicDataFrame(df._jdf.select(self._columns), df.sparkSession)


class Aggregate:
    """df.groupBy(*keys).agg(*aggregations), the columns converted once."""

    def __init__(self, spark: SparkSession, keys: Sequence[ColumnOrName], aggregations: Sequence[Column]) -> None:
        if not aggregations:
            raise ValueError("an aggregate needs at least one aggregation")
        self._keys = jvm_columns(spark, keys)
        self._first = aggregations[0]._jc
        self._rest = jvm_columns(spark, aggregations[1:])

    def __call__(self, df: DataFrame) -> DataFrame:
        return ClassicDataFrame(df._jdf.groupBy(self._keys).agg(self._first, self._rest), df.sparkSession)


class Observe:
    """df.observe(name, *metrics), the metrics converted once; each call names its own observation."""

    def __init__(self, spark: SparkSession, metrics: Sequence[Column]) -> None:
        if not metrics:
            raise ValueError("an observation needs at least one metric")
        self._first = metrics[0]._jc
        self._rest = jvm_columns(spark, metrics[1:])

    def __call__(self, df: DataFrame, name: str) -> DataFrame:
        return ClassicDataFrame(df._jdf.observe(name, self._first, self._rest), df.sparkSession)


class Join:
    """left.join(right, on=columns, how=how): an equi-join on columns both sides name alike."""

    def __init__(self, spark: SparkSession, on: Sequence[str], how: str) -> None:
        self._on = spark._jvm.PythonUtils.toSeq(list(on))
        self._how = how

    def __call__(self, left: DataFrame, right: DataFrame) -> DataFrame:
        return ClassicDataFrame(left._jdf.join(right._jdf, self._on, self._how), left.sparkSession)


class Where:
    """df.where(condition), the condition converted once."""

    def __init__(self, condition: Column) -> None:
        self._condition = condition._jc

    def __call__(self, df: DataFrame) -> DataFrame:
        return ClassicDataFrame(df._jdf.filter(self._condition), df.sparkSession)


class SortWithinPartitions:
    """df.sortWithinPartitions(*columns), ascending, the columns converted once."""

    def __init__(self, spark: SparkSession, columns: Sequence[ColumnOrName]) -> None:
        self._columns = jvm_columns(spark, [F.col(c) if isinstance(c, str) else c for c in columns])

    def __call__(self, df: DataFrame) -> DataFrame:
        return ClassicDataFrame(df._jdf.sortWithinPartitions(self._columns), df.sparkSession)


ArrowBatches = Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]


def _quoted(name: str) -> str:
    """A column name as F.col reads it literally (dots and all)."""
    return "`" + name.replace("`", "``") + "`"


class MapInArrow:
    """df.mapInArrow(func, schema), the function pickled once.

    PySpark's mapInArrow pickles the function into a new Python UDF on every call, parses its schema
    and looks each input column up in the JVM (a round trip each), for a step whose function never
    changes. Here the UDF is built once, and its input columns once for each set of columns it is
    applied to (a run's batches all bring the same)."""

    def __init__(self, spark: SparkSession, func: ArrowBatches, schema: str) -> None:
        from pyspark.sql.pandas.functions import pandas_udf  # imports pandas: only for a run that maps

        udf = pandas_udf(func, returnType=schema, functionType=PythonEvalType.SQL_MAP_ARROW_ITER_UDF)  # type: ignore[call-overload]
        self._spark = spark
        self._judf = udf._unwrapped._judf  # the pickled function, as a JVM UserDefinedPythonFunction
        self._inputs: tuple[tuple[str, ...], object] | None = None

    def __call__(self, df: DataFrame) -> DataFrame:
        columns = tuple(df.columns)
        if self._inputs is None or self._inputs[0] != columns:
            self._inputs = columns, jvm_columns(self._spark, [F.col(_quoted(c)) for c in columns])
        function = self._judf.apply(self._inputs[1])
        return ClassicDataFrame(df._jdf.mapInArrow(function, False, None), df.sparkSession)
