"""The plain-Python Delta log replay on hand-written logs: what it answers, and what it leaves to
Spark (non-local storage, a commit missing after the newest checkpoint, a v2 checkpoint)."""

import json
from pathlib import Path

from deltastate.changelog.log_state import column_max, read_log_state


def test_what_the_replay_does_not_follow(tmp_path: Path) -> None:
    """Non-local storage, a commit missing after the newest checkpoint and a v2 checkpoint answer
    None (the caller asks Spark); an empty folder is no table."""
    assert read_log_state("s3://bucket/table") is None
    table = tmp_path / "t"
    log = table / "_delta_log"
    log.mkdir(parents=True)
    assert read_log_state(str(table)).absent
    meta = {"metaData": {"id": "x", "configuration": {"k": "v"}, "partitionColumns": []}}
    for version, actions in enumerate([[meta], [{"txn": {"appId": "a", "version": 3}}], []]):
        (log / f"{version:020d}.json").write_text("\n".join(json.dumps(a) for a in [{"commitInfo": {}}, *actions]))
    state = read_log_state(str(table))
    assert (state.version, state.configuration, state.txns) == (2, {"k": "v"}, {"a": 3})
    assert column_max(str(table), "epoch") == (True, None)  # a table without rows
    (log / f"{1:020d}.json").unlink()
    assert read_log_state(str(table)) is None
    (log / f"{1:020d}.json").write_text(json.dumps({"txn": {"appId": "a", "version": 3}}))
    (log / f"{2:020d}.checkpoint.0b2e7a5c-1111-2222-3333-444455556666.json").write_text("{}")
    assert read_log_state(str(table)) is None
