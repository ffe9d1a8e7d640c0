"""A local Delta table's state, replayed from its log in plain Python: no Spark job, no JVM.

A store run asks its tables a few questions before the first batch and around each audit copy:
which definition the changelog recorded (a table property), which batch each lineage appended last
(the idempotent writers' txn entries), whether any file of the current epoch holds another lineage's
rows (file statistics). Delta answers them from a snapshot, which Spark rebuilds with a job per
table; the answers are small, and the log that holds them is a handful of local files. So they are
read here, as Delta's protocol defines a snapshot: the newest complete checkpoint (Parquet: the
metaData, txn, add columns) plus every JSON commit after it, in order.

Anything this reader does not follow (storage that is not a local path, a v2 or unfinished
checkpoint, a commit missing after the checkpoint, an unreadable file) answers None, and the caller
asks Spark, which stays the reference.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deltastate.changelog.deltalog import commit_versions, complete_checkpoints, local_dir, v2_checkpoints


@dataclass(frozen=True)
class LogState:
    """A table's snapshot facts at `version` (-1: no table at the path)."""

    version: int
    configuration: dict[str, str] = field(default_factory=dict)
    txns: dict[str, int] = field(default_factory=dict)  # appId -> newest txnVersion
    files: dict[str, dict[str, Any]] | None = None  # live add actions by path, when asked for

    @property
    def absent(self) -> bool:
        return self.version < 0


def _apply(state: dict[str, Any], action: dict[str, Any], with_files: bool) -> None:
    if (meta := action.get("metaData")) is not None:
        state["configuration"] = dict(meta.get("configuration") or {})
    elif (txn := action.get("txn")) is not None:
        state["txns"][txn["appId"]] = int(txn["version"])
    elif with_files and (add := action.get("add")) is not None:
        state["files"][add["path"]] = add
    elif with_files and (remove := action.get("remove")) is not None:
        state["files"].pop(remove["path"], None)


def checkpoint_actions(files: list[Path], with_files: bool) -> list[dict[str, Any]]:
    """The metaData, txn (and with_files: add) actions of a classic checkpoint's Parquet files."""
    import pyarrow.parquet as pq  # only a log with a checkpoint needs it

    columns = ["metaData", "txn", *(["add"] if with_files else [])]
    actions: list[dict[str, Any]] = []
    for file in files:
        table = pq.ParquetFile(file).read(columns=columns)
        for column in columns:
            for value in table.column(column).to_pylist():
                if value is not None:
                    if column == "metaData" and isinstance(value.get("configuration"), list):
                        value["configuration"] = dict(value["configuration"])  # a Parquet map reads as pairs
                    if column == "add" and isinstance(value.get("partitionValues"), list):
                        value["partitionValues"] = dict(value["partitionValues"])
                    actions.append({column: value})
    return actions


def read_log_state(table_path: str, with_files: bool = False) -> LogState | None:
    """The table's newest snapshot facts from its local log; None when this reader cannot tell (the
    caller then asks Spark). with_files: also the live files' add actions (partition values, stats)."""
    root = local_dir(table_path)
    if root is None:
        return None
    log = root / "_delta_log"
    try:
        names = os.listdir(log)
    except FileNotFoundError:
        return LogState(-1)
    except OSError:
        return None
    commits, checkpoints = commit_versions(names), complete_checkpoints(log, names)
    if not commits:
        return LogState(-1)
    newest = commits[-1]
    start = max((v for v in checkpoints if v <= newest), default=-1)
    if any(start < v <= newest for v in v2_checkpoints(names)):
        return None
    present = set(commits)
    if any(v not in present for v in range(start + 1, newest + 1)):
        return None  # a gap (log cleanup racing this read, or a hand-edited log)
    state: dict[str, Any] = {"configuration": {}, "txns": {}, "files": {}}
    try:
        if start >= 0:
            for action in checkpoint_actions(checkpoints[start], with_files):
                _apply(state, action, with_files)
        for version in range(start + 1, newest + 1):
            with open(log / f"{version:020d}.json") as fh:
                for line in fh:
                    if line.strip():
                        _apply(state, json.loads(line), with_files)
    except (OSError, ValueError, KeyError, TypeError, NotImplementedError, ImportError):
        return None  # pyarrow's errors derive from these too (ArrowInvalid is a ValueError)
    return LogState(newest, state["configuration"], state["txns"], state["files"] if with_files else None)


def file_column_range(add: dict[str, Any], column: str) -> tuple[Any, Any, bool] | None:
    """(min, max, all null) of a column in one data file's statistics; None when the file has none."""
    stats = add.get("stats")
    if not stats:
        return None
    try:
        parsed = json.loads(stats)
        records = parsed["numRecords"]
        nulls = parsed.get("nullCount", {}).get(column)
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    if nulls is not None and nulls == records:
        return None, None, True
    low, high = parsed.get("minValues", {}).get(column), parsed.get("maxValues", {}).get(column)
    if low is None or high is None:
        return None
    return low, high, False


def column_max(table_path: str, column: str) -> tuple[bool, Any]:
    """(answered, the newest value of a column over the table's live rows, from file statistics;
    None for no table, no rows or only nulls). Not answered when a file lacks the column's
    statistics, for a string column (Delta truncates those), or when the log cannot be replayed."""
    state = read_log_state(table_path, with_files=True)
    if state is None:
        return False, None
    highest = None
    for add in (state.files or {}).values():
        bounds = file_column_range(add, column)
        if bounds is None or isinstance(bounds[1], str):
            return False, None
        if not bounds[2]:
            highest = bounds[1] if highest is None else max(highest, bounds[1])
    return True, highest


__all__ = ["LogState", "checkpoint_actions", "column_max", "file_column_range", "read_log_state"]
