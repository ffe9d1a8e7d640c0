"""The Spark session deltastate creates, read back from its running JVM: local jars only, and the
driver options that infra/spark.py sets, with DELTASTATE_DRIVER_JAVA_OPTS appended last."""

from __future__ import annotations

from pathlib import Path

import pytest

from deltastate.infra.spark import spark_conf

pytestmark = pytest.mark.integration


def _vm_option(spark, name: str) -> str:
    jvm = spark._jvm
    bean_class = jvm.java.lang.Class.forName("com.sun.management.HotSpotDiagnosticMXBean")
    return jvm.java.lang.management.ManagementFactory.getPlatformMXBean(bean_class).getVMOption(name).getValue()


def test_the_driver_jvm_runs_with_the_configured_options(spark) -> None:
    args = list(spark._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments())
    assert "-Xss64m" in args, args
    # The flag took effect: HotSpot reports the stack size it runs with (KiB), not just the argument.
    assert int(_vm_option(spark, "ThreadStackSize")) == 64 * 1024


def test_jars_are_local_files_never_a_download(spark) -> None:
    conf = spark.sparkContext.getConf()
    assert not conf.get("spark.jars.packages", "")  # an Ivy resolution would download at start-up
    jars = conf.get("spark.jars").split(",")
    assert any("delta-spark" in j for j in jars) and any("spark-sql-kafka" in j for j in jars), jars
    assert all(Path(j).is_file() for j in jars), [j for j in jars if not Path(j).is_file()]


def test_driver_options_from_the_environment_come_last(session_settings, monkeypatch) -> None:
    monkeypatch.setenv("DELTASTATE_DRIVER_JAVA_OPTS", "-XX:CompileThresholdScaling=4 -Xss32m")
    options = spark_conf(session_settings, "t")["spark.driver.extraJavaOptions"].split()
    # HotSpot takes the last of repeated flags, so the environment's stack size wins over -Xss64m.
    assert options[-2:] == ["-XX:CompileThresholdScaling=4", "-Xss32m"]
    assert options.index("-Xss64m") < options.index("-Xss32m")
