"""Reads a Delta table's transaction log directly, in plain Python: no Spark in the query service.

Three questions, all answered from `_delta_log/<version>.json` commit files:
  * newest_commit(): the newest committed version and its commit time (for staleness). The time is
    the commit's in-commit timestamp when the table has them, else the commit file's modification
    time, which is what Delta's own history() reports, so it compares with the commit time the
    snapshot recorded at publish;
  * tail_files(): the data files a range of commits added and that are still live at the newest
    commit (for fresh reads: the changelog records committed after a snapshot);
  * appended_files(): the data files a range of commits added as new data (the metrics exporter
    follows a run's dead letters so);
  * user_metadata_newest_first(): each commit's userMetadata, newest commit first (the crash
    trials find the newest batch whose audit a commit carries).

Only local tables (a plain path or file:) are readable this way; other storage answers None and the
service says staleness is unknown. Results are cached for a short while: a busy service asks many
times a second, and a commit file, once written, never changes.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import unquote, urlparse

from deltastate.errors import FreshReadError


def local_dir(table_path: str) -> Path | None:
    """The table's local directory, None for non-local storage (those are read through Spark)."""
    parsed = urlparse(table_path)
    if parsed.scheme in ("", "file"):
        return Path(unquote(parsed.path) if parsed.scheme else table_path)
    return None


_COMMIT = re.compile(r"^(\d{20})\.json$")
# Classic checkpoints: one file, or parts numbered i of n.
_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint(?:\.(\d{10})\.(\d{10}))?\.parquet$")
# A v2 checkpoint (`<v>.checkpoint.<uuid>.parquet|json`) lists its files in sidecars.
_V2_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint\.[0-9a-f-]{36}\.(?:parquet|json)$")


def commit_versions(names: list[str]) -> list[int]:
    """The versions of the JSON commit files among a log folder's names, in order."""
    return sorted(int(m.group(1)) for n in names if (m := _COMMIT.match(n)))


def complete_checkpoints(log: Path, names: list[str]) -> dict[int, list[Path]]:
    """version -> its classic checkpoint files, only for versions whose parts are all there."""
    parts: dict[int, list[tuple[int, Path]]] = {}
    expected: dict[int, int] = {}
    for name in names:
        if m := _CHECKPOINT.match(name):
            version = int(m.group(1))
            parts.setdefault(version, []).append((int(m.group(2) or 1), log / name))
            expected[version] = int(m.group(3) or 1)
    return {v: [p for _, p in sorted(ps)] for v, ps in parts.items() if len(ps) == expected[v]}


def v2_checkpoints(names: list[str]) -> set[int]:
    """Versions with a v2 checkpoint, which the plain-Python readers do not follow."""
    return {int(m.group(1)) for n in names if (m := _V2_CHECKPOINT.match(n))}


@dataclass(frozen=True)
class Commit:
    version: int
    committed_at: datetime  # naive UTC, like the snapshot's metadata


@dataclass(frozen=True)
class TailFile:
    path: Path
    version: int  # the commit that added it (orders records of equal (epoch, batch_id))


def _versions(log: Path) -> list[int]:
    try:
        return commit_versions(os.listdir(log))
    except FileNotFoundError:
        return []


def _actions(log: Path, version: int) -> list[dict]:
    try:
        text = (log / f"{version:020d}.json").read_text()
    except FileNotFoundError as exc:
        raise FreshReadError(f"Delta commit {version} of {log.parent} is gone (log retention?); "
                             "publish a new snapshot instead of reading fresh") from exc
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _folder_stat(table_path: str) -> tuple[int, ...] | None:
    """What changes when a file enters or leaves a local table's log folder; None elsewhere."""
    root = local_dir(table_path)
    if root is None:
        return None
    try:
        st = os.stat(root / "_delta_log")
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns


def _commit_time(log: Path, version: int) -> datetime:
    path = log / f"{version:020d}.json"
    millis = None
    with open(path) as fh:  # commitInfo comes first; the add actions after it may be many
        first = json.loads(fh.readline() or "{}")
    if "commitInfo" in first:
        millis = first["commitInfo"].get("inCommitTimestamp")
    if millis is None:
        millis = os.stat(path).st_mtime_ns // 1_000_000
    return datetime.fromtimestamp(millis / 1000, tz=UTC).replace(tzinfo=None)


def newest_version(table_path: str) -> int | None:
    """The newest committed version of a local Delta table, from its log's file names; None when
    there is no (local) table."""
    root = local_dir(table_path)
    versions = [] if root is None else _versions(root / "_delta_log")
    return versions[-1] if versions else None


def newest_commit(table_path: str) -> Commit | None:
    """The newest commit of a local Delta table (version and commit time, naive UTC); None when
    there is no (local) table."""
    root = local_dir(table_path)
    log = None if root is None else root / "_delta_log"
    versions = [] if log is None else _versions(log)
    return Commit(versions[-1], _commit_time(log, versions[-1])) if versions else None


def appended_files(table_path: str, first: int, last: int) -> list[Path]:
    """Data files that commits first..last of a local table added as new data. OPTIMIZE's rewrites add
    files with dataChange false (the same rows again) and are left out, so rows are never counted
    twice; a commit past log retention is skipped (its rows are not counted)."""
    root = local_dir(table_path)
    if root is None:
        raise ValueError(f"{table_path} is not a local table")
    out: list[Path] = []
    for version in range(first, last + 1):
        try:
            actions = _actions(root / "_delta_log", version)
        except FreshReadError:
            continue
        out.extend(root / unquote(a["add"]["path"]) for a in actions if "add" in a and a["add"].get("dataChange", True))
    return out


def commit_metadata(table_path: str, first: int, last: int) -> list[tuple[int, datetime, str | None]]:
    """(version, commit time as aware UTC, userMetadata) of commits first..last of a local table, as
    Delta's history() gives them; a commit file no longer in the log is passed over, as history()
    passes it over."""
    root = local_dir(table_path)
    if root is None:
        raise ValueError(f"{table_path} is not a local table")
    log = root / "_delta_log"
    out = []
    for version in range(max(first, 0), last + 1):
        try:
            actions = _actions(log, version)
            at = _commit_time(log, version).replace(tzinfo=UTC)
        except (FreshReadError, FileNotFoundError):
            continue
        info = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
        out.append((version, at, info.get("userMetadata")))
    return out


def user_metadata_newest_first(table_path: str) -> Iterator[str | None]:
    """The userMetadata of each commit of a local table, newest first; nothing for a table that does
    not exist (yet). A commit file removed by log cleanup while this reads is passed over."""
    root = local_dir(table_path)
    if root is None:
        raise ValueError(f"{table_path} is not a local table")
    log = root / "_delta_log"
    for version in reversed(_versions(log)):
        try:
            actions = _actions(log, version)
        except FreshReadError:
            continue
        yield next((a["commitInfo"].get("userMetadata") for a in actions if "commitInfo" in a), None)


class DeltaLog:
    """Cached, thread-safe reads of Delta logs; ttl: how long a newest-commit answer is reused while
    the log folder looks unchanged.

    A commit adds a file to the log folder, which changes the folder's modification time: an answer
    is read again as soon as the folder's stat differs from the one it was read under, so a busy
    reader sees a commit at once and pays one stat per ask in between. The ttl still bounds the
    reuse: a file system stamps times from a coarse clock (milliseconds), so a commit landing in the
    same tick as the read before it leaves the stat as it was."""

    def __init__(self, ttl: float = 0.5) -> None:
        self.ttl = ttl
        self._newest: dict[str, tuple[float, tuple[int, ...] | None, Commit | None]] = {}
        self._lock = threading.Lock()

    def newest_commit(self, table_path: str) -> Commit | None:
        """The newest commit of the table, None when there is no (local) table."""
        now = time.monotonic()
        folder = _folder_stat(table_path)
        with self._lock:
            cached = self._newest.get(table_path)
        if cached is not None and now - cached[0] < self.ttl and cached[1] == folder:
            return cached[2]
        found = newest_commit(table_path)
        with self._lock:
            self._newest[table_path] = (now, folder, found)
        return found

    @staticmethod
    def tail_files(table_path: str, after_version: int | None, up_to: int) -> list[TailFile]:
        """Data files added by commits after_version+1 .. up_to (all commits when after_version is
        None) and not removed again by a later commit of that range. A file carrying a deletion
        vector is refused: the changelog is append-only, so one means somebody rewrote it."""
        root = local_dir(table_path)
        if root is None:
            raise FreshReadError(f"fresh reads need a local changelog; {table_path} is not local")
        log = root / "_delta_log"
        first = 0 if after_version is None else after_version + 1
        live: dict[str, TailFile] = {}
        for version in range(first, up_to + 1):
            for action in _actions(log, version):
                if "add" in action:
                    add = action["add"]
                    if add.get("deletionVector"):
                        raise FreshReadError(f"{table_path} commit {version} adds a file with a deletion vector; "
                                             "fresh reads only follow appends")
                    live[add["path"]] = TailFile(root / unquote(add["path"]), version)
                elif "remove" in action:
                    live.pop(action["remove"]["path"], None)
        return sorted(live.values(), key=lambda f: (f.version, str(f.path)))


__all__ = ["Commit", "DeltaLog", "TailFile", "appended_files", "commit_metadata", "commit_versions", "complete_checkpoints",
           "local_dir", "newest_version", "v2_checkpoints"]
