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


CLASS_LOAD_PROBE = """
import sys
from deltastate.config import load_settings
from deltastate.infra.spark import get_spark
spark = get_spark(load_settings(), "class-archive-probe")
spark.range(3).write.format("delta").save(sys.argv[1])
print(spark.read.format("delta").load(sys.argv[1]).count())
"""


def test_spark_processes_load_spark_and_delta_classes_from_the_class_archive(session_settings, tmp_path) -> None:
    """`make setup` built the archive for this JVM and classpath; a new Spark process maps it and
    takes Spark's and Delta's classes from it (the JVM's own class-load log says where each came from)."""
    import os
    import subprocess
    import sys

    from deltastate.infra.class_archive import archive_options, archive_path
    from deltastate.infra.spark import driver_jars

    jars = driver_jars(session_settings)
    archive = archive_path(session_settings, jars)
    assert archive is not None and archive.is_file(), f"no class archive at {archive}: run `make setup`"
    assert archive_options(session_settings, jars)[0] == f"-XX:SharedArchiveFile={archive}"
    log = tmp_path / "classes.log"
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("DELTASTATE_")}, **session_settings.to_env(),
           "DELTASTATE_DRIVER_JAVA_OPTS": f"-Xlog:class+load=info:file={log}", "DELTASTATE_DRIVER_MEMORY": "1g"}
    done = subprocess.run([sys.executable, "-c", CLASS_LOAD_PROBE, str(tmp_path / "table")], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and done.stdout.strip().endswith("3"), done.stderr[-3000:]
    assert "cds" not in done.stderr.lower(), done.stderr[-3000:]
    # Generated classes (lambdas, proxies, codegen) have no jar to come from; every class that has
    # one is counted: from the archive, or read from its jar.
    named = [line for line in log.read_text().splitlines()
             if "source: shared objects file (top)" in line or "source: file:" in line]
    archived = [line for line in named if "shared objects file" in line]
    delta = [line for line in named if " org.apache.spark.sql.delta." in line]
    assert len(archived) > 0.8 * len(named), (len(archived), len(named))
    # Delta comes from deltastate's jars on the driver classpath: those are archived too.
    assert sum("shared objects file" in line for line in delta) > 0.8 * len(delta), delta[:5]
