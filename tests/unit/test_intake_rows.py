"""Audit rows as changelog/intake.py parses them: the JSON columns typed, older rows without the later
columns, and the JSON a writer carries into a batch read back as it was written."""

from __future__ import annotations

import json
from datetime import datetime

from deltastate.changelog.audit_log import audit_record
from deltastate.changelog.intake import AuditPosition, AuditRow, Carried, carried_counts_json, carried_stream_times_json


def test_a_written_row_parses_back() -> None:
    carried = carried_counts_json({0: (10, 9, 1, 0)}, {0: 41, 2: 7})
    row = audit_record("lin", 3, {0: (5, 5, 0, 1)}, {0: (42, 46)}, {0: 1_000}, carried)
    parsed = AuditRow.parse({**row, "write_time": datetime(2026, 1, 1)})
    assert (parsed.lineage_id, parsed.batch_id) == ("lin", 3)
    assert parsed.counts == {0: (5, 5, 0, 1)} and parsed.offsets == {0: (42, 46)} and parsed.stream_times == {0: 1_000}
    assert parsed.carried == Carried({0: (10, 9, 1, 0)}, {0: 41, 2: 7}, {})
    assert parsed.highest_offsets == {0: 46, 2: 7}  # the lineage's position after the batch
    assert parsed.written == datetime(2026, 1, 1)


def test_window_writers_carry_stream_times() -> None:
    assert Carried.parse(carried_stream_times_json({1: 5, 0: 9})) == Carried({}, {}, {0: 9, 1: 5})
    assert json.loads(carried_stream_times_json({1: 5})) == {"stream_times": {"1": 5}}


def test_older_rows_read_without_later_columns() -> None:
    parsed = AuditRow.parse({"lineage_id": "l", "batch_id": 0, "offsets": json.dumps({"1": [0, 4]}), "stream_times": None})
    assert parsed.counts is None and parsed.carried is None and parsed.stream_times == {}
    assert parsed.highest_offsets == {1: 4}


def test_next_offsets_are_one_past_the_audited() -> None:
    assert AuditPosition({0: (0, 9), 1: (3, 3)}, {}).next_offsets == {0: 10, 1: 4}
