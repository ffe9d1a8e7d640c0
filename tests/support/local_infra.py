"""Helpers for tests that run local infrastructure: free loopback ports and test homes that reuse
the project's fetched jars instead of running Maven again."""

from __future__ import annotations

import socket
from pathlib import Path

from deltastate.config import PROJECT_ROOT

SHARED_JARS = PROJECT_ROOT / ".deltastate" / "jars"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def make_home(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    SHARED_JARS.mkdir(parents=True, exist_ok=True)
    if not (path / "jars").exists():
        (path / "jars").symlink_to(SHARED_JARS, target_is_directory=True)
    return path
