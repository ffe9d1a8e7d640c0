"""The one function that prints every read answer (cli/output.py show_read): the store key and values
for people, bookkeeping with --meta, a rank column for top, name/value lines for a get, and JSON
with every column whatever the view."""

from __future__ import annotations

import json
from datetime import datetime

import pytest

from deltastate.cli.output import format_record, format_table, show_read
from deltastate.snapshot.publish import PROVENANCE

BOOKKEEPING = [name for name, _ in PROVENANCE]
COLUMNS = ["key", "games", "total_score", *BOOKKEEPING]
ROWS = [
    {"key": "b", "games": 12, "total_score": 900, "source_partition": 1, "source_offset": 40, "batch_id": 3,
     "event_time": datetime(2024, 1, 2, 3, 4, 5), "write_time": datetime(2024, 1, 2, 3, 4, 6)},
    {"key": "a", "games": 3, "total_score": None, "source_partition": 0, "source_offset": 7, "batch_id": 3,
     "event_time": datetime(2024, 1, 1), "write_time": datetime(2024, 1, 2)},
]


def lines(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return capsys.readouterr().out.rstrip("\n").split("\n")


def test_the_table_shows_key_and_values(capsys: pytest.CaptureFixture[str]) -> None:
    show_read(COLUMNS, ROWS, snapshot_version=4, as_json=False)
    header, rule, first, second, footer = lines(capsys)
    assert header.split() == ["key", "games", "total_score"]
    assert set(rule) == {"-", " "}
    assert first.split() == ["b", "12", "900"] and second.split() == ["a", "3", "NULL"]
    assert footer == "(2 rows, snapshot 4)"
    assert first.index("12") + 2 == header.index("games") + len("games")  # numbers right-aligned


def test_meta_adds_the_bookkeeping(capsys: pytest.CaptureFixture[str]) -> None:
    show_read(COLUMNS, ROWS, snapshot_version=4, as_json=False, meta=True, notes=("committed",))
    header, _, first, _, footer = lines(capsys)
    assert header.split() == COLUMNS
    assert "2024-01-02 03:04:05" in first and footer == "(2 rows, snapshot 4, committed)"


def test_ranked_rows_are_numbered_in_order(capsys: pytest.CaptureFixture[str]) -> None:
    show_read(COLUMNS, ROWS, snapshot_version=1, as_json=False, ranked=True)
    header, _, first, second, _ = lines(capsys)
    assert header.split()[:2] == ["rank", "key"]
    assert first.split()[:2] == ["1", "b"] and second.split()[:2] == ["2", "a"]


def test_a_single_get_reads_down(capsys: pytest.CaptureFixture[str]) -> None:
    show_read(COLUMNS, ROWS[:1], snapshot_version=2, as_json=False, single=True)
    *body, footer = lines(capsys)
    assert body == ["key          b", "games        12", "total_score  900"]
    assert footer == "(1 row, snapshot 2)"


def test_json_has_every_column_whatever_the_view(capsys: pytest.CaptureFixture[str]) -> None:
    show_read(COLUMNS, ROWS, snapshot_version=1, as_json=True, ranked=True, single=True)
    rows = [json.loads(line) for line in lines(capsys)]
    assert [list(r) for r in rows] == [COLUMNS, COLUMNS]
    assert rows[0]["event_time"] == "2024-01-02T03:04:05Z" and rows[1]["total_score"] is None


def test_formatters() -> None:
    assert format_table(["k", "n"], []) == "k  n\n-  -"
    assert format_record(["key", "n"], {"key": "x", "n": None}) == "key  x\nn    NULL"
