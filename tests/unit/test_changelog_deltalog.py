"""The pure-Python Delta log reader behind staleness and fresh reads, on hand-written logs: the
newest commit and its time (in-commit timestamp, else the commit file's mtime), the files a range
of commits added and that are still live, and the refusals."""

import json
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from deltastate.changelog.deltalog import DeltaLog, local_dir, user_metadata_newest_first
from deltastate.query.errors import FreshReadError


def commit(table: Path, version: int, *actions: dict, ict: int | None = None, mtime: float | None = None) -> None:
    log = table / "_delta_log"
    log.mkdir(parents=True, exist_ok=True)
    info = {"commitInfo": {"timestamp": 1, "operation": "WRITE", **({"inCommitTimestamp": ict} if ict else {})}}
    path = log / f"{version:020d}.json"
    path.write_text("\n".join(json.dumps(a) for a in (info, *actions)) + "\n")
    if mtime is not None:
        os.utime(path, (mtime, mtime))


def add(path: str, data_change: bool = True, dv: dict | None = None) -> dict:
    body = {"path": path, "partitionValues": {}, "size": 1, "modificationTime": 0, "dataChange": data_change}
    return {"add": {**body, **({"deletionVector": dv} if dv else {})}}


def remove(path: str) -> dict:
    return {"remove": {"path": path, "deletionTimestamp": 0, "dataChange": False}}


def test_newest_commit_time_and_cache(tmp_path: Path) -> None:
    table = tmp_path / "t"
    assert DeltaLog().newest_commit(str(table)) is None
    commit(table, 0, add("a.parquet"), mtime=1_700_000_000.25)
    commit(table, 1, add("b.parquet"), mtime=1_700_000_100.5)
    log = DeltaLog(ttl=60)
    newest = log.newest_commit(str(table))
    assert newest.version == 1
    assert newest.committed_at == datetime.fromtimestamp(1_700_000_100.5, tz=UTC).replace(tzinfo=None)
    # Within the ttl, an answer is reused while the log folder is unchanged: a file outside the log
    # changes nothing, a commit (a new file in the folder) is read at once.
    (table / "c.parquet").write_bytes(b"")
    assert log.newest_commit(str(table)).version == 1
    folder = table / "_delta_log"
    before = os.stat(folder)
    commit(table, 2, add("c.parquet"), ict=1_800_000_000_123)
    os.utime(folder, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000))  # the clock ticked meanwhile
    newest = log.newest_commit(str(table))
    assert newest.version == 2 and newest.committed_at == datetime(2027, 1, 15, 8, 0, 0, 123000)
    # A commit that leaves the folder's stat as it was (same clock tick) is reused until the ttl.
    stamped = os.stat(folder)
    commit(table, 3, add("d.parquet"))
    os.utime(folder, ns=(stamped.st_atime_ns, stamped.st_mtime_ns))
    assert log.newest_commit(str(table)).version == 2
    assert DeltaLog(ttl=0).newest_commit(f"file://{table}").version == 3


def test_tail_files_live_adds_only(tmp_path: Path) -> None:
    table = tmp_path / "t"
    commit(table, 0, add("segment=0/p0.parquet"))
    commit(table, 1, add("segment=0/p1.parquet"), add("segment=0/p%3D2.parquet"))
    commit(table, 2, remove("segment=0/p1.parquet"), remove("segment=0/p0.parquet"),
           add("segment=0/compacted.parquet", data_change=False))
    commit(table, 3, add("segment=1/p3.parquet"))
    tail = DeltaLog.tail_files(str(table), 0, 3)
    assert [(f.path.relative_to(table).as_posix(), f.version) for f in tail] == [
        ("segment=0/p=2.parquet", 1), ("segment=0/compacted.parquet", 2), ("segment=1/p3.parquet", 3)]
    assert [f.version for f in DeltaLog.tail_files(str(table), None, 0)] == [0]
    assert DeltaLog.tail_files(str(table), 3, 3) == []


def test_refusals(tmp_path: Path) -> None:
    table = tmp_path / "t"
    commit(table, 0, add("a.parquet"))
    commit(table, 1, add("b.parquet", dv={"storageType": "u", "pathOrInlineDv": "x"}))
    with pytest.raises(FreshReadError, match="deletion vector"):
        DeltaLog.tail_files(str(table), 0, 1)
    with pytest.raises(FreshReadError, match="commit 5 .* is gone"):
        DeltaLog.tail_files(str(table), 4, 5)
    with pytest.raises(FreshReadError, match="not local"):
        DeltaLog.tail_files("s3://bucket/t", 0, 1)
    assert local_dir("s3://bucket/t") is None and local_dir("/x/y") == Path("/x/y")
    assert DeltaLog().newest_commit("s3://bucket/t") is None


def test_user_metadata_newest_first(tmp_path: Path) -> None:
    table = tmp_path / "t"
    assert list(user_metadata_newest_first(str(table))) == []  # no table yet
    commit(table, 0, add("a.parquet"))
    commit(table, 1, add("b.parquet"))
    commit(table, 2, add("c.parquet"))
    # Commits 0 and 2 carry metadata (as a batch's one commit carries its audit); 1 carries none.
    for version, text in ((0, "first"), (2, "third")):
        path = table / "_delta_log" / f"{version:020d}.json"
        lines = path.read_text().splitlines()
        info = json.loads(lines[0])
        info["commitInfo"]["userMetadata"] = text
        path.write_text("\n".join([json.dumps(info), *lines[1:]]) + "\n")
    assert list(user_metadata_newest_first(f"file://{table}")) == ["third", None, "first"]
    with pytest.raises(ValueError, match="not a local table"):
        list(user_metadata_newest_first("s3://bucket/t"))
