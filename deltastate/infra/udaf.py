"""Builds deltastate's own JVM functions (jvm/src, the resettable fold) into a jar with javac,
against pyspark's bundled jars, so Spark loads them from a local path like every other jar.
Rebuilt only when the sources change."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
from pathlib import Path

from deltastate.config import PROJECT_ROOT, Settings
from deltastate.errors import InfraError

SOURCES = PROJECT_ROOT / "jvm" / "src"


def _sources_hash() -> str:
    digest = hashlib.sha256()
    for path in sorted(SOURCES.rglob("*.java")):
        digest.update(path.relative_to(SOURCES).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def udaf_jar(settings: Settings) -> Path:
    """Path of the built jar, building it first when missing or stale."""
    import pyspark

    jar = settings.jars_dir / "deltastate-functions" / f"deltastate-functions-{_sources_hash()}.jar"
    if jar.is_file():
        return jar
    javac, jar_tool = shutil.which("javac"), shutil.which("jar")
    if not javac or not jar_tool:
        raise InfraError("javac and jar (a JDK 17) are needed to build deltastate's Spark functions; install openjdk-17-jdk")
    classpath = str(Path(pyspark.__file__).parent / "jars" / "*")
    jar.parent.mkdir(parents=True, exist_ok=True)
    for old in jar.parent.glob("deltastate-functions-*.jar"):
        old.unlink()
    with tempfile.TemporaryDirectory() as classes:
        sources = [str(p) for p in sorted(SOURCES.rglob("*.java"))]
        built = subprocess.run([javac, "-nowarn", "--release", "17", "-d", classes, "-cp", classpath, *sources],
                               capture_output=True, text=True)
        if built.returncode != 0:
            raise InfraError(f"javac failed building {SOURCES}:\n{built.stderr[-3000:]}")
        tmp = jar.with_suffix(".tmp")
        packed = subprocess.run([jar_tool, "cf", str(tmp), "-C", classes, "."], capture_output=True, text=True)
        if packed.returncode != 0:
            raise InfraError(f"jar failed: {packed.stderr[-2000:]}")
        tmp.replace(jar)
    return jar
