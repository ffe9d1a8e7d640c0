"""The JVM jars deltastate needs, fetched by Maven from jvm/pom.xml into one folder per profile.

Why folders per profile: the Kafka broker and Spark must never share a classpath (they pull
different kafka-clients, SLF4J and Scala lines), so each gets its own folder. Why a marker file:
Maven takes seconds even with a warm ~/.m2, and a half-copied folder must never pass for a complete
one, so a folder counts as fetched only once a marker holding the pom.xml hash is written after a
successful run; editing pom.xml changes the hash and triggers a refetch.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from pathlib import Path

from deltastate.config import PROJECT_ROOT, Settings
from deltastate.errors import InfraError

POM = PROJECT_ROOT / "jvm" / "pom.xml"
# The Kafka Streams peer of `deltastate bench peers`: a pom of its own, so that editing it refetches
# nothing of deltastate's own jars.
PEERS_POM = PROJECT_ROOT / "bench" / "peers" / "pom.xml"
PEERS_PROFILE = "peers"
MAVEN_SETTINGS = PROJECT_ROOT / "jvm" / "settings.xml"
PROFILES: tuple[str, ...] = ("broker", "spark-kafka", "delta")
SPARK_PROFILES: tuple[str, ...] = ("spark-kafka", "delta")
MARKER = ".fetched"
MVN_TIMEOUT_S = 1800
# Jars never put on spark.jars although pyspark lacks them under that name: pyspark routes
# commons-logging through jcl-over-slf4j, and a real commons-logging beside it splits logging.
ALWAYS_EXCLUDED: frozenset[str] = frozenset({"commons-logging"})

# "<artifact>-<version>.jar", where a version starts with digits-dot-digits and may carry
# qualifiers ("1.5.7-3", "2.0.0-M1"). Requiring the dot keeps "spark-sql-kafka-0-10_2.13" whole.
_JAR_NAME = re.compile(r"^(?P<artifact>.+?)-(?P<version>\d+(?:\.\d+)+(?:[-.][A-Za-z0-9_.]+)*)\.jar$")
_JAR_NAME_SIMPLE = re.compile(r"^(?P<artifact>.+)-(?P<version>\d[A-Za-z0-9_.]*)\.jar$")


def artifact_name(file_name: str) -> str:
    """The artifact id of a Maven jar file name: "kafka-clients-3.9.2.jar" -> "kafka-clients"."""
    for pattern in (_JAR_NAME, _JAR_NAME_SIMPLE):
        match = pattern.match(file_name)
        if match:
            return match.group("artifact")
    return file_name.removesuffix(".jar")


def select_spark_jars(candidate_names: Iterable[str], bundled_names: Iterable[str]) -> list[str]:
    """Keep the candidate jar names Spark lacks: drop any artifact pyspark already bundles (in any
    version), commons-logging, and repeats of an artifact already kept. Order is preserved.

    Why: two versions of hadoop, parquet, jackson or scala on one classpath fail at run time with
    NoSuchMethodError and similar, far from the cause; pyspark's own copies are the ones Spark 4.2
    was built and tested with.
    """
    taken = {artifact_name(name) for name in bundled_names if name.endswith(".jar")}
    taken |= ALWAYS_EXCLUDED
    kept: list[str] = []
    for name in candidate_names:
        if not name.endswith(".jar"):
            continue
        artifact = artifact_name(name)
        if artifact in taken:
            continue
        taken.add(artifact)
        kept.append(name)
    return kept


def pom_hash(pom: Path = POM) -> str:
    """Hash of the Maven descriptor; a fetched folder is current only while this is unchanged."""
    return hashlib.sha256(pom.read_bytes()).hexdigest()


def profile_dir(settings: Settings, profile: str) -> Path:
    return settings.jars_dir / profile


def is_fetched(settings: Settings, profile: str, pom: Path = POM) -> bool:
    """True when the profile's folder holds a complete fetch made from the current pom.xml."""
    marker = profile_dir(settings, profile) / MARKER
    try:
        return marker.read_text().strip() == pom_hash(pom)
    except OSError:
        return False


def _require_tools() -> str:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise InfraError("Maven (`mvn`) is not on PATH; install Maven 3.8+ to fetch deltastate's JVM jars")
    if shutil.which("java") is None:
        raise InfraError("Java (`java`) is not on PATH; install a JDK 17+ (Maven, Kafka and Spark need it)")
    return mvn


def _fetch(settings: Settings, profile: str, mvn: str, pom: Path = POM) -> None:
    """Copy one profile's runtime dependencies into a staging folder, then swap it into place, so an
    interrupted fetch never leaves a folder that looks complete."""
    target = profile_dir(settings, profile)
    staging = target.with_name(f".{profile}.staging")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    cmd = [
        mvn, "-q", "-B", "-s", str(MAVEN_SETTINGS), "-f", str(pom), "-P", profile,
        "dependency:copy-dependencies", f"-DoutputDirectory={staging}",
    ]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=MVN_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise InfraError(f"mvn did not finish fetching jars for profile {profile!r} in {MVN_TIMEOUT_S}s") from exc
    if proc.returncode != 0 or not any(staging.glob("*.jar")):
        shutil.rmtree(staging, ignore_errors=True)
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-30:])
        raise InfraError(
            f"mvn failed to fetch jars for profile {profile!r} (exit {proc.returncode}); "
            f"command: {' '.join(cmd)}\n{tail or '(no output)'}"
        )
    (staging / MARKER).write_text(pom_hash(pom) + "\n")
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)


def ensure_jars(settings: Settings, profiles: Sequence[str] = PROFILES) -> dict[str, Path]:
    """Make sure each profile's jar folder is fetched from the current pom.xml; return the folders.

    Idempotent and cheap when nothing changed (no Maven run), so callers may invoke it every time.
    """
    unknown = [p for p in profiles if p not in PROFILES]
    if unknown:
        raise InfraError(f"unknown jar profile(s) {', '.join(unknown)}; known: {', '.join(PROFILES)}")
    missing = [p for p in profiles if not is_fetched(settings, p)]
    if missing:
        mvn = _require_tools()
        settings.jars_dir.mkdir(parents=True, exist_ok=True)
        for profile in missing:
            _fetch(settings, profile, mvn)
    return {p: profile_dir(settings, p) for p in profiles}


def pyspark_bundled_jars() -> list[str]:
    """File names of the jars inside the installed pyspark package."""
    import pyspark  # deferred: importing pyspark is slow and the broker side never needs it

    return sorted(p.name for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar"))


def spark_jars(settings: Settings) -> list[str]:
    """Absolute paths to put in spark.jars: the Kafka source and Delta jars minus pyspark's own."""
    folders = ensure_jars(settings, SPARK_PROFILES)
    by_name: dict[str, Path] = {}
    for profile in SPARK_PROFILES:
        for jar in sorted(folders[profile].glob("*.jar")):
            by_name.setdefault(jar.name, jar)
    kept = select_spark_jars(by_name, pyspark_bundled_jars())
    return [str(by_name[name]) for name in kept]


def broker_classpath(settings: Settings) -> str:
    """The java -cp value for the broker: a wildcard over its folder, expanded by java itself."""
    return f"{profile_dir(settings, 'broker')}/*"


def ensure_peer_jars(settings: Settings) -> Path:
    """The folder of the Kafka Streams peer's jars (bench/peers/pom.xml), fetched when missing."""
    if not is_fetched(settings, PEERS_PROFILE, PEERS_POM):
        settings.jars_dir.mkdir(parents=True, exist_ok=True)
        _fetch(settings, PEERS_PROFILE, _require_tools(), PEERS_POM)
    return profile_dir(settings, PEERS_PROFILE)
