"""The audit a changelog commit carries (changelog/audit_log.py): what a commit's userMetadata holds,
and what is not an audit; the copy interval setting."""

import json

import pytest

from deltastate.changelog.audit_log import FLUSH_KEY, BatchAudit, audit_record
from deltastate.config import load_settings
from deltastate.errors import ConfigError


def _record() -> dict:
    return audit_record("lin-1", 7, {0: (5, 4, 1, 1), 2: (3, 3, 0, 0)}, {0: (10, 14), 2: (0, 2)},
                        {0: 1_700_000_000_000}, json.dumps({"counts": {}, "hi": {}}), late=1)


def test_an_audit_round_trips_through_commit_metadata() -> None:
    audit = BatchAudit("deltastate/s/intake/lin-1", _record())
    back = BatchAudit.from_metadata(audit.metadata())
    assert back == audit
    # The row sums its partitions and keeps them as the intake table's JSON columns.
    assert (back.row["records_in"], back.row["applied"], back.row["dead_lettered"], back.row["tombstones"]) == (8, 7, 1, 1)
    assert json.loads(back.row["partition_counts"]) == {"0": [5, 4, 1, 1], "2": [3, 3, 0, 0]}
    assert json.loads(back.row["offsets"]) == {"0": [10, 14], "2": [0, 2]}
    assert back.row["late"] == 1


@pytest.mark.parametrize("text", [None, "", "deltastate compact s from version 3",
                                  json.dumps({FLUSH_KEY: 12}), "{not json", json.dumps({"deltastate.audit": 5})])
def test_other_commit_metadata_is_not_an_audit(text) -> None:
    assert BatchAudit.from_metadata(text) is None


@pytest.mark.parametrize("value", ["-1", "soon", "nan"])
def test_the_copy_interval_must_be_seconds(value: str) -> None:
    with pytest.raises(ConfigError, match="DELTASTATE_AUDIT_FLUSH_SECONDS"):
        load_settings({"DELTASTATE_AUDIT_FLUSH_SECONDS": value})
    assert load_settings({"DELTASTATE_AUDIT_FLUSH_SECONDS": "2.5"}).audit_flush_seconds == 2.5
