"""The spark.jars filter: pyspark's bundled artifacts must never be loaded twice."""

from __future__ import annotations

import pytest

from deltastate.infra.jars import artifact_name, select_spark_jars

BUNDLED = [
    "hadoop-client-api-3.5.0.jar", "hadoop-client-runtime-3.5.0.jar", "parquet-hadoop-1.17.0.jar",
    "jackson-core-2.21.2.jar", "jackson-databind-2.21.2.jar", "jackson-annotations-2.21.jar",
    "slf4j-api-2.0.17.jar", "scala-library-2.13.17.jar", "log4j-api-2.25.4.jar", "log4j-core-2.25.4.jar",
    "jcl-over-slf4j-2.0.17.jar", "commons-pool-1.5.4.jar", "hive-shims-2.3.10.jar", "orc-shims-2.3.0.jar",
    "zstd-jni-1.5.7-7.jar", "spark-tags_2.13-4.2.0.jar", "lz4-java-1.11.0.jar", "jsr305-3.0.0.jar",
]


@pytest.mark.parametrize(
    ("file_name", "artifact"),
    [
        ("kafka-clients-3.9.2.jar", "kafka-clients"),
        ("spark-sql-kafka-0-10_2.13-4.2.0.jar", "spark-sql-kafka-0-10_2.13"),
        ("delta-spark_4.2_2.13-4.4.0.jar", "delta-spark_4.2_2.13"),
        ("zstd-jni-1.5.7-3.jar", "zstd-jni"),
        ("jackson-annotations-2.21.jar", "jackson-annotations"),
        ("kafka_2.13-4.3.1.jar", "kafka_2.13"),
        ("javax.annotation-api-1.3.2.jar", "javax.annotation-api"),
        ("foo-2.0.0-M1.jar", "foo"),
        ("bar-7.jar", "bar"),
    ],
)
def test_artifact_name(file_name: str, artifact: str) -> None:
    assert artifact_name(file_name) == artifact


def test_drops_artifacts_pyspark_bundles_in_any_version() -> None:
    candidates = [
        "hadoop-client-api-3.4.2.jar", "parquet-hadoop-1.16.0.jar", "jackson-core-2.13.5.jar",
        "slf4j-api-1.7.36.jar", "scala-library-2.13.15.jar", "log4j-core-2.25.3.jar", "zstd-jni-1.5.7-3.jar",
        "delta-spark_4.2_2.13-4.4.0.jar", "jackson-datatype-jdk8-2.13.5.jar",
    ]
    assert select_spark_jars(candidates, BUNDLED) == ["delta-spark_4.2_2.13-4.4.0.jar", "jackson-datatype-jdk8-2.13.5.jar"]


def test_commons_logging_always_excluded() -> None:
    assert select_spark_jars(["commons-logging-1.3.0.jar", "shims-0.9.25.jar"], []) == ["shims-0.9.25.jar"]


def test_similar_names_are_not_confused() -> None:
    # "shims" is not "hive-shims"; "commons-pool2" is not "commons-pool"; kafka-clients is absent.
    kept = select_spark_jars(["shims-0.9.25.jar", "commons-pool2-2.13.1.jar", "commons-pool-1.6.jar",
                              "kafka-clients-3.9.2.jar"], BUNDLED)
    assert kept == ["shims-0.9.25.jar", "commons-pool2-2.13.1.jar", "kafka-clients-3.9.2.jar"]


def test_repeats_across_folders_kept_once_and_non_jars_ignored() -> None:
    kept = select_spark_jars(["delta-storage-4.4.0.jar", ".fetched", "delta-storage-4.4.1.jar"], BUNDLED)
    assert kept == ["delta-storage-4.4.0.jar"]


def test_real_folders_give_the_expected_set() -> None:
    spark_kafka = ["commons-pool2-2.13.1.jar", "jsr305-3.0.0.jar", "kafka-clients-3.9.2.jar", "lz4-java-1.10.1.jar",
                   "scala-library-2.13.15.jar", "scala-parallel-collections_2.13-1.2.0.jar", "slf4j-api-1.7.36.jar",
                   "snappy-java-1.1.10.5.jar", "spark-sql-kafka-0-10_2.13-4.2.0.jar", "spark-tags_2.13-4.2.0.jar",
                   "spark-token-provider-kafka-0-10_2.13-4.0.0.jar"]
    bundled = BUNDLED + ["scala-parallel-collections_2.13-1.2.0.jar", "snappy-java-1.1.10.8.jar"]
    assert select_spark_jars(spark_kafka, bundled) == [
        "commons-pool2-2.13.1.jar", "kafka-clients-3.9.2.jar", "spark-sql-kafka-0-10_2.13-4.2.0.jar",
        "spark-token-provider-kafka-0-10_2.13-4.0.0.jar",
    ]
