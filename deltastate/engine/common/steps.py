"""DataFrame steps whose columns reach the JVM once per run, for plans a micro-batch builds again.

PySpark hands a call's column list to the JVM one element at a time: a py4j round trip per column,
and one more per column given by name, each 0.5-0.8 ms on a loaded 2-core machine, paid again by
every micro-batch that builds the same plan over its own DataFrame. A step here converts its
columns when it is built; applying it is one round trip plus Spark's analysis of the step. The
columns name what they read (F.col), so one step applies to every batch's DataFrame.
"""

from __future__ import annotations

from collections.abc import Sequence

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
