"""A class-data archive (JDK AppCDS) of the classes a deltastate Spark process loads.

A short-lived Spark process (`deltastate run --once` from Airflow, restore, compact, a CLI command)
spends most of its start loading and verifying Spark's and Delta's classes from their jars, before
any work. The JVM can map those classes from an archive instead: `build_archive` runs a small
workload of the same kinds (Delta tables, a stateful stream on RocksDB written with foreachBatch,
windows) in a JVM that dumps every class it loaded at exit, and every later Spark process started by
`infra/spark.py` maps the archive (`-XX:SharedArchiveFile`).

The archive is only valid for the JVM and the exact classpath it was dumped with, so its file name
carries a hash of both (the java binary, every jar's name, size and time): after an upgrade of
pyspark, a jar or the JDK, no archive matches and processes start without one until `deltastate
infra setup` builds the new one. Classes come from the archive only through the JVM's own class
loaders, which is why the jars go on the driver's classpath (`spark.driver.extraClassPath`): in a
local Spark the executors share the driver's JVM.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from deltastate.config import Settings
from deltastate.errors import InfraError

# Bumped when the training workload changes, so a new setup builds a fresh archive.
TRAINING_VERSION = "1"
# Without these, a JVM that cannot use the archive (a classpath changed since) prints a warning on
# every start; it falls back to loading from the jars either way.
QUIET = ("-Xlog:cds=off", "-Xlog:cds+dynamic=off")
DISABLE_ENV = "DELTASTATE_CLASS_ARCHIVE"  # "0": start Spark without the archive


def _java() -> Path | None:
    home = os.environ.get("JAVA_HOME")
    found = Path(home) / "bin" / "java" if home else None
    if found is None or not found.is_file():
        which = shutil.which("java")
        found = Path(which) if which else None
    return found.resolve() if found else None


def _spark_jar_folder() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


def archive_path(settings: Settings, driver_jars: list[str]) -> Path | None:
    """Where the archive for this JVM and classpath lives (it may not exist); None without a java."""
    java = _java()
    if java is None:
        return None
    digest = hashlib.sha256(TRAINING_VERSION.encode())
    for path in [java, *sorted(_spark_jar_folder().glob("*.jar")), *map(Path, driver_jars)]:
        try:
            stat = path.stat()
        except OSError:
            continue
        digest.update(f"{path}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return settings.jars_dir / "class-archive" / f"spark-{digest.hexdigest()[:16]}.jsa"


def archive_options(settings: Settings, driver_jars: list[str]) -> list[str]:
    """The JVM options that map the archive, when one matches this JVM and classpath."""
    if os.environ.get(DISABLE_ENV) == "0":
        return []
    path = archive_path(settings, driver_jars)
    return [f"-XX:SharedArchiveFile={path}", *QUIET] if path is not None and path.is_file() else []


def build_archive(settings: Settings, driver_jars: list[str], timeout: float = 900) -> Path | None:
    """Builds the archive for the current JVM and classpath unless it exists; older archives are
    removed. Returns its path (None without a java on this machine)."""
    path = archive_path(settings, driver_jars)
    if path is None or path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".{os.getpid()}.tmp")
    log = path.parent / "training.log"
    with tempfile.TemporaryDirectory(prefix="deltastate-class-archive-") as work, open(log, "w") as out:
        env = {k: v for k, v in os.environ.items() if not k.startswith("DELTASTATE_")}
        env.update({DISABLE_ENV: "0", "DELTASTATE_HOME": str(settings.home), "DELTASTATE_STORAGE": work,
                    "DELTASTATE_DRIVER_JAVA_OPTS": " ".join([f"-XX:ArchiveClassesAtExit={partial}", *QUIET])})
        done = subprocess.run([sys.executable, "-m", "deltastate.infra.archive_training", work], env=env,
                              stdout=out, stderr=subprocess.STDOUT, timeout=timeout)
    if done.returncode != 0 or not partial.is_file():
        partial.unlink(missing_ok=True)
        raise InfraError(f"no JVM class archive: its training run did not dump one (exit {done.returncode}, log "
                         f"{log}); Spark starts without it, more slowly; `deltastate infra setup` tries again")
    for old in path.parent.glob("spark-*.jsa"):
        old.unlink()
    partial.replace(path)
    log.unlink(missing_ok=True)
    return path
