"""How the CLI prints answers: one function, `show_read`, for every read command, and the aligned
table it and the other commands use.

A person reading a store wants the store key and the values; where each row came from (source
partition and offset, micro-batch, event and write time) is bookkeeping, shown with --meta. JSON
(--json) is for programs: every column, one object per line, whatever --meta says."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import date, datetime
from decimal import Decimal
from typing import Any

import click

RANK = "rank"


def json_default(value: Any) -> Any:
    """Snapshot times are naive UTC: written with a Z."""
    if isinstance(value, datetime):
        return value.isoformat() + ("Z" if value.tzinfo is None else "")
    if isinstance(value, date):
        return value.isoformat()
    return float(value) if isinstance(value, Decimal) else value.hex() if isinstance(value, bytes) else str(value)


def _cell(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, datetime):
        return value.isoformat(sep=" ")
    return str(value)


def _numeric(value: Any) -> bool:
    return isinstance(value, int | float | Decimal) and not isinstance(value, bool)


def format_table(columns: Sequence[str], rows: Sequence[dict[str, Any]]) -> str:
    """Aligned plain-text table: header, a rule of dashes, rows; numbers right-aligned."""
    cells = [[_cell(row.get(c)) for c in columns] for row in rows]
    widths = [max([len(c), *(len(r[i]) for r in cells)]) for i, c in enumerate(columns)]
    numeric = [bool(rows) and all(_numeric(v) for row in rows if (v := row.get(c)) is not None) for c in columns]

    def line(values: Sequence[str]) -> str:
        parts = zip(values, widths, numeric, strict=True)
        return "  ".join(v.rjust(w) if num else v.ljust(w) for v, w, num in parts).rstrip()

    return "\n".join([line(columns), line(["-" * w for w in widths]), *(line(r) for r in cells)])


def format_record(columns: Sequence[str], row: dict[str, Any]) -> str:
    """One row as `name  value` lines, names aligned: a single entry reads down, not across."""
    width = max((len(c) for c in columns), default=0)
    return "\n".join(f"{c.ljust(width)}  {_cell(row.get(c))}".rstrip() for c in columns)


def emit(columns: Sequence[str], rows: Sequence[dict[str, Any]], as_json: bool, footer: str | None = None) -> None:
    """Rows as JSON lines, or as a table with an optional footer line."""
    if as_json:
        for row in rows:
            click.echo(json.dumps(row, default=json_default))
        return
    click.echo(format_table(columns, rows))
    if footer:
        click.echo(footer)


def show_read(columns: Sequence[str], rows: Sequence[dict[str, Any]], *, snapshot_version: int, as_json: bool,
              meta: bool = False, ranked: bool = False, single: bool = False, notes: Sequence[str] = ()) -> None:
    """Print a read's answer. Table view: the columns without the snapshot's provenance columns
    (snapshot/publish.py PROVENANCE: source partition and offset, batch, event and write time)
    unless `meta`; `ranked`
    (top) numbers the rows 1.. in a leading rank column, their position in the ordering; `single`
    (get) prints the one row as name/value lines. Then a footer: rows, snapshot, and `notes`
    (consistency, schema version). JSON: the rows exactly as answered."""
    if as_json:
        emit(columns, rows, True)
        return
    from deltastate.snapshot.publish import PROVENANCE  # loaded already by the read that answered

    bookkeeping = {name for name, _ in PROVENANCE}
    shown = [c for c in columns if meta or c not in bookkeeping]
    if ranked and RANK not in shown:
        shown = [RANK, *shown]
        rows = [{RANK: i, **row} for i, row in enumerate(rows, start=1)]
    n = len(rows)
    footer = f"({n} row{'s' if n != 1 else ''}, snapshot {snapshot_version}{''.join(', ' + x for x in notes)})"
    if single and n == 1:
        click.echo(format_record(shown, rows[0]))
        click.echo(footer)
        return
    emit(shown, rows, False, footer)


__all__ = ["emit", "format_record", "format_table", "json_default", "show_read"]
