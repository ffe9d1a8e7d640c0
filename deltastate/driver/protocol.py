"""What a client and a home's resident driver share: the files under HOME/driver and the
fingerprint both sides must agree on before a command is sent.

The fingerprint is everything that shapes the driver's Spark session or the command's meaning
beyond its arguments: the settings (as the environment that gives them), the JVM options read from
the environment, the Python interpreter and the code's newest modification. A client whose
fingerprint differs runs its command in its own process instead (and says why), so a driver
started before a code change or under other settings never runs a command it would run differently.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from deltastate.config import PROJECT_ROOT, Settings

# Environment read when the Spark session is created (infra/spark.py), beyond the settings.
SESSION_ENV = ("DELTASTATE_DRIVER_JAVA_OPTS", "DELTASTATE_DRIVER_MEMORY", "DELTASTATE_SPARK_LOG_LEVEL")
# The commands a driver runs: those whose cost is a Spark session's start and a cold JIT. A
# continuous run stays in its own process: it is already warm, and it must stop with its process.
RUNS = ("run", "job")


def refusal(argv: list[str]) -> str | None:
    """Why the driver does not run argv, or None when it does."""
    if not argv or argv[0] not in RUNS or "--continuous" in argv:
        return (f"the resident driver runs `deltastate run STORE --once` and `deltastate job ...`, "
                f"not `deltastate {' '.join(argv)}`")
    return None
FAMILY = "AF_UNIX"


@dataclass(frozen=True)
class DriverPaths:
    """A home's driver files: its socket, the key a client proves itself with (owner-only), the
    lock one driver per home holds, its log, and its description (pid, fingerprint) as JSON."""

    folder: Path

    @classmethod
    def of(cls, settings: Settings) -> DriverPaths:
        return cls(settings.home / "driver")

    @property
    def socket(self) -> Path:
        return self.folder / "driver.sock"

    @property
    def key(self) -> Path:
        return self.folder / "driver.key"

    @property
    def lock(self) -> Path:
        return self.folder / "driver.lock"

    @property
    def log(self) -> Path:
        return self.folder / "driver.log"

    @property
    def info(self) -> Path:
        return self.folder / "driver.json"


def fingerprint(settings: Settings) -> dict[str, object]:
    """What a command's process would run with; the driver's must be equal for it to run the command."""
    return {"settings": settings.to_env(),
            "session_env": {name: os.environ.get(name, "") for name in SESSION_ENV},
            "python": sys.executable,
            "code": code_stamp()}


def code_stamp(root: Path = PROJECT_ROOT / "deltastate") -> str:
    """The newest modification among the package's Python files and the JVM sources its jar is built
    from: a driver started before an edit or an upgrade runs the older code."""
    newest = 0
    for folder in (root, PROJECT_ROOT / "jvm" / "src"):
        for dirpath, _, names in os.walk(folder):
            for name in names:
                if name.endswith((".py", ".java")):
                    newest = max(newest, os.stat(os.path.join(dirpath, name)).st_mtime_ns)
    return str(newest)


def differences(ours: dict[str, object], theirs: dict[str, object]) -> list[str]:
    """The fingerprint's parts that differ, named for a message: `settings.DELTASTATE_STORAGE`, `code`."""
    found = []
    for part in sorted(set(ours) | set(theirs)):
        mine, other = ours.get(part), theirs.get(part)
        if isinstance(mine, dict) and isinstance(other, dict):
            found += [f"{part}.{name}" for name in sorted(set(mine) | set(other)) if mine.get(name) != other.get(name)]
        elif mine != other:
            found.append(part)
    return found
