"""A local Delta table's log replayed in plain Python: per commit, its time, the idempotent-append
txns it carries and the live files, bytes and rows after it; and the live files with their stats.

For pages that run where Spark is not (the Airflow plugin): the replay starts from the newest
classic checkpoint written before the asked-for start time (so a long-lived table is not replayed
from version 0 on every request), then reads each JSON commit once; a replay is kept and extended
by the commits that land later.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote

from deltastate.changelog.deltalog import commit_versions, complete_checkpoints
from deltastate.changelog.log_state import checkpoint_actions
from deltastate.errors import DeltastateError


class LogReplayError(DeltastateError):
    """The table's log cannot be replayed here (missing commits, an unsupported checkpoint)."""


@dataclass(frozen=True)
class LiveFile:
    path: Path
    size: int
    rows: int | None  # numRecords of its stats; None without stats
    max_values: dict  # the stats' maxValues (empty without stats)


@dataclass(frozen=True)
class CommitSummary:
    version: int
    at_ms: int  # inCommitTimestamp, else commitInfo.timestamp, else the commit file's mtime
    txns: tuple[tuple[str, int], ...]  # (txnAppId, txnVersion) of the idempotent appends it made
    files: int  # live files after the commit
    bytes: int
    rows: int | None  # None when a live file has no numRecords


@dataclass
class _Replay:
    start_ms: int  # commits from this time on are all in `commits`
    version: int = -1  # newest version replayed
    live: dict[str, LiveFile] = field(default_factory=dict)
    commits: list[CommitSummary] = field(default_factory=list)


def _live_file(root: Path, add: dict) -> LiveFile:
    stats = json.loads(add["stats"]) if add.get("stats") else {}
    rows = stats.get("numRecords")
    return LiveFile(root / unquote(add["path"]), int(add["size"]), None if rows is None else int(rows),
                    stats.get("maxValues") or {})


class TableLog:
    """Replays of local Delta tables, kept per table and extended as commits land (thread-safe)."""

    def __init__(self) -> None:
        self._replays: dict[Path, _Replay] = {}
        self._lock = threading.Lock()

    def replay(self, root: Path, since_ms: int) -> tuple[list[CommitSummary], dict[str, LiveFile]]:
        """The table's commits (at least every commit at or after since_ms) and its live files now.
        ([], {}) when there is no table at root."""
        log = root / "_delta_log"
        try:
            names = os.listdir(log)
        except FileNotFoundError:
            return [], {}
        with self._lock:
            replay = self._replays.get(root)
            if replay is None or replay.start_ms > since_ms:
                replay = self._begin(root, log, names, since_ms)
                self._replays[root] = replay
            versions = commit_versions(names)
            for version in (v for v in versions if v > replay.version):
                if version != replay.version + 1:
                    raise LogReplayError(f"{root}: Delta commit {replay.version + 1} is missing from its log")
                self._apply(root, log, replay, version)
            return list(replay.commits), dict(replay.live)

    @staticmethod
    def _begin(root: Path, log: Path, names: list[str], since_ms: int) -> _Replay:
        commits = commit_versions(names)
        checkpoints = complete_checkpoints(log, names)
        # A checkpoint is a start only when every commit after it is still in the log.
        kept, first_kept = set(commits), commits[-1] if commits else 0
        while first_kept - 1 in kept:
            first_kept -= 1
        startable = sorted(v for v in checkpoints if v + 1 >= first_kept)
        # The newest checkpoint written before since_ms; version 0 itself when the log still starts
        # there and no such checkpoint exists; else the oldest checkpoint there is.
        before = [v for v in startable if checkpoints[v][0].stat().st_mtime * 1000 < since_ms]
        if before or (startable and first_kept > 0):
            version = max(before) if before else startable[0]
            # Started past since_ms: nothing older is left to read, so the replay serves any window.
            start_ms = int(checkpoints[version][0].stat().st_mtime * 1000) if before else 0
            replay = _Replay(start_ms=start_ms, version=version)
            replay.live = _read_checkpoint(root, checkpoints[version])
            return replay
        if first_kept == 0:
            return _Replay(start_ms=0)
        raise LogReplayError(f"{root}: the log starts at version {first_kept} with no classic checkpoint to start from")

    @staticmethod
    def _apply(root: Path, log: Path, replay: _Replay, version: int) -> None:
        path = log / f"{version:020d}.json"
        at_ms, txns = None, []
        with open(path) as fh:
            for line in fh:
                if not line.strip():
                    continue
                action = json.loads(line)
                if "add" in action:
                    replay.live[action["add"]["path"]] = _live_file(root, action["add"])
                elif "remove" in action:
                    replay.live.pop(action["remove"]["path"], None)
                elif "txn" in action:
                    txns.append((action["txn"]["appId"], int(action["txn"]["version"])))
                elif "commitInfo" in action:
                    info = action["commitInfo"]
                    at_ms = info.get("inCommitTimestamp") or info.get("timestamp")
        if at_ms is None:
            at_ms = os.stat(path).st_mtime_ns // 1_000_000
        rows = [f.rows for f in replay.live.values()]
        replay.commits.append(CommitSummary(
            version, int(at_ms), tuple(txns), len(replay.live), sum(f.size for f in replay.live.values()),
            None if any(r is None for r in rows) else sum(rows)))
        replay.version = version


def _read_checkpoint(root: Path, files: list[Path]) -> dict[str, LiveFile]:
    return {action["add"]["path"]: _live_file(root, action["add"])
            for action in checkpoint_actions(files, with_files=True) if "add" in action}


__all__ = ["CommitSummary", "LiveFile", "LogReplayError", "TableLog"]
