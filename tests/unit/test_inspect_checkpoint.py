"""`deltastate inspect`'s checkpoint section on hand-written checkpoints: the lineage file's id and
epoch when it is whole, unknown (not a refusal) when it is damaged, and the newest planned and
committed batches from Spark's offset and commit logs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from deltastate.engine.common.lineage import LINEAGE_FILE
from deltastate.engine.common.source import QUERY
from deltastate.maintenance.inspect import _checkpoint


def checkpoint(root: Path, lineage: str | None, planned: int, committed: int) -> Path:
    for folder, newest in (("offsets", planned), ("commits", committed)):
        (root / QUERY / folder).mkdir(parents=True, exist_ok=True)
        for batch in range(newest + 1):
            (root / QUERY / folder / str(batch)).write_text("v1\n{}\n")
    if lineage is not None:
        (root / LINEAGE_FILE).write_text(lineage)
    return root


def test_a_whole_lineage_file_is_reported(tmp_path: Path) -> None:
    found = _checkpoint(checkpoint(tmp_path, json.dumps({"lineage_id": "abc", "epoch": 3, "store": "s"}), 4, 3))
    assert (found["lineage_id"], found["epoch"], found["planned_batch"], found["committed_batch"]) == ("abc", 3, 4, 3)


@pytest.mark.parametrize("text", ['{"lineage_id": "abc"}', '{"lineage_id": "abc", "epoch": null}', "{not json"])
def test_a_damaged_lineage_file_is_unknown(tmp_path: Path, text: str) -> None:
    found = _checkpoint(checkpoint(tmp_path, text, 1, 1))
    assert (found["lineage_id"], found["epoch"], found["planned_batch"]) == (None, None, 1)
