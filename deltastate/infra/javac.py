"""Builds a jar from a folder of Java sources with the JDK's javac and jar, named by a hash of the
sources so that a jar is rebuilt only when they change, and never half-written (built under a
temporary name, then renamed). deltastate's Spark functions (infra/udaf.py) and the Kafka Streams
peer of `deltastate bench peers` are built this way."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
from pathlib import Path

from deltastate.errors import InfraError


def sources_hash(sources: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(sources.rglob("*.java")):
        digest.update(path.relative_to(sources).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def built_jar(sources: Path, classpath: str, folder: Path, name: str, purpose: str) -> Path:
    """folder/name-<sources hash>.jar, compiled against `classpath` first when missing; older builds
    of the same name are removed. purpose: what the jar is for, in error messages."""
    jar = folder / f"{name}-{sources_hash(sources)}.jar"
    if jar.is_file():
        return jar
    javac, jar_tool = shutil.which("javac"), shutil.which("jar")
    if not javac or not jar_tool:
        raise InfraError(f"javac and jar (a JDK 17) are needed to build {purpose}; install openjdk-17-jdk")
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob(f"{name}-*.jar"):
        old.unlink()
    with tempfile.TemporaryDirectory() as classes:
        files = [str(p) for p in sorted(sources.rglob("*.java"))]
        built = subprocess.run([javac, "-nowarn", "--release", "17", "-d", classes, "-cp", classpath, *files],
                               capture_output=True, text=True)
        if built.returncode != 0:
            raise InfraError(f"javac failed building {sources}:\n{built.stderr[-3000:]}")
        tmp = jar.with_suffix(".tmp")
        packed = subprocess.run([jar_tool, "cf", str(tmp), "-C", classes, "."], capture_output=True, text=True)
        if packed.returncode != 0:
            raise InfraError(f"jar failed: {packed.stderr[-2000:]}")
        tmp.replace(jar)
    return jar
