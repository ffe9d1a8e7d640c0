"""Builds deltastate's own JVM functions (jvm/src: the resettable fold, the live-entry store, the
Delta log cleanup and checkpoint) into a jar with javac, against pyspark's bundled jars and the Delta jars, so Spark
loads them from a local path like every other jar. Rebuilt only when the sources change."""

from __future__ import annotations

from pathlib import Path

from deltastate.config import PROJECT_ROOT, Settings
from deltastate.infra.jars import profile_dir
from deltastate.infra.javac import built_jar

SOURCES = PROJECT_ROOT / "jvm" / "src"


def udaf_jar(settings: Settings) -> Path:
    """Path of the built jar, building it first when missing or stale."""
    import pyspark

    classpath = ":".join([str(Path(pyspark.__file__).parent / "jars" / "*"), str(profile_dir(settings, "delta") / "*")])
    return built_jar(SOURCES, classpath, settings.jars_dir / "deltastate-functions", "deltastate-functions",
                     "deltastate's Spark functions")
