"""`deltastate get|top|rank|range|all|windows|sessions|sql` (interactive queries over the current
snapshot) and `deltastate snapshot publish|list`. Times (--from, --to, --earliest-end,
--latest-start) are epoch millis or ISO-8601, UTC when no zone is given.

Output: an aligned table, or with --json one JSON object per line. Exit status: 0 on success, 1 when
the key is not found (`not found: ...` on stderr), 2 for any other deltastate error (`error: ...`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import date, datetime
from decimal import Decimal
from typing import Any

import click

from deltastate.cli.errors import reported as _reported
from deltastate.cli.errors import settings_of as _settings


# -- output --------------------------------------------------------------------------------------
def _json_default(value: Any) -> Any:
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


def format_table(columns: Sequence[str], rows: Sequence[dict[str, Any]]) -> str:
    """Aligned plain-text table; numbers right-aligned, everything else left-aligned."""
    cells = [[_cell(row.get(c)) for c in columns] for row in rows]
    widths = [max([len(c), *(len(r[i]) for r in cells)]) for i, c in enumerate(columns)]
    numeric = [bool(rows) and all(isinstance(v, int | float | Decimal) and not isinstance(v, bool)
                                  for row in rows if (v := row.get(c)) is not None) for c in columns]

    def line(values: Sequence[str]) -> str:
        cells = zip(values, widths, numeric, strict=True)
        return "  ".join(v.rjust(w) if num else v.ljust(w) for v, w, num in cells).rstrip()

    return "\n".join([line(columns), line(["-" * w for w in widths]), *(line(r) for r in cells)])


def emit(columns: Sequence[str], rows: Sequence[dict[str, Any]], as_json: bool, footer: str | None = None) -> None:
    if as_json:
        for row in rows:
            click.echo(json.dumps(row, default=_json_default))
        return
    click.echo(format_table(columns, rows))
    if footer:
        click.echo(footer)


def _emit_result(result: Any, as_json: bool) -> None:
    n = len(result.rows)
    emit(result.columns, result.rows, as_json, f"({n} row{'s' if n != 1 else ''}, snapshot {result.snapshot_version})")


json_option = click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")


def _read(ctx: click.Context, as_json: bool, call: Callable[[Any], Any]) -> None:
    from deltastate.query import Queries  # deferred: keeps `deltastate --help` fast

    with Queries(_settings(ctx)) as queries:
        _emit_result(call(queries), as_json)


# -- query commands ------------------------------------------------------------------------------
@click.command("get")
@click.argument("store")
@click.argument("key")
@click.option("--consistency", type=click.Choice(["snapshot", "committed", "latest"]), default="snapshot",
              show_default=True, help="snapshot: the published snapshot; committed: plus the changelog commits after "
                                      "it; latest: plus the source records the stream has not committed yet.")
@click.option("--schema-version", type=click.IntRange(min=1), default=None,
              help="Answer in this value schema version's shape (default: the version the snapshot holds).")
@json_option
@click.pass_context
@_reported
def get_cmd(ctx: click.Context, store: str, key: str, consistency: str, schema_version: int | None,
            as_json: bool) -> None:
    """The value of KEY in STORE."""
    if consistency == "snapshot" and schema_version is None:
        _read(ctx, as_json, lambda q: q.get(store, key))
        return
    from deltastate.errors import KeyNotFoundError
    from deltastate.query.errors import FreshReadError
    from deltastate.query.tail import topic_ends
    from deltastate.service.options import ServiceOptions
    from deltastate.service.state import ReadOptions, ServiceState
    from deltastate.stores.versions import down_convert

    settings = _settings(ctx)
    state = ServiceState(settings, ServiceOptions())  # the REST service's read path, for one read
    try:
        with state.reading([store], ReadOptions(consistency=consistency, schema_version=schema_version)) as reading:
            definition = reading.queries.store(store)
            served = schema_version or definition.value_version
            footer = f"snapshot {reading.snapshot.version}, schema version {served}"
            if reading.latest is None:
                result = reading.queries.get(store, key)
                columns, rows = result.columns, result.rows
            else:
                tail = reading.latest.tails[store]
                ends = topic_ends(settings.kafka_bootstrap, tail.topic)
                if not tail.wait_for(ends, timeout=30):
                    raise FreshReadError(f"topic {tail.topic!r}: could not read up to offsets {ends} within 30 s")
                rows, position = reading.latest.get_many(reading.queries, store, [key])
                if not rows:
                    raise KeyNotFoundError(store, key)
                columns = list(rows[0])
                footer += ", latest: " + ", ".join(
                    f"{p}: committed {o['committed_offset']}, applied {o['latest_offset_applied']}"
                    for p, o in position.body().items())
            if served != definition.value_version:
                rows = [down_convert(definition, row, served) for row in rows]
                columns = list(down_convert(definition, dict.fromkeys(columns), served))
            emit(columns, rows, as_json, f"({len(rows)} row{'s' if len(rows) != 1 else ''}, {footer})")
    finally:
        state.close()


@click.command("top")
@click.argument("store")
@click.option("--n", "n", default=10, show_default=True, type=click.IntRange(min=1), help="How many keys.")
@click.option("--by", default=None, help="Numeric value column (default: the store's leaderboard column).")
@json_option
@click.pass_context
@_reported
def top_cmd(ctx: click.Context, store: str, n: int, by: str | None, as_json: bool) -> None:
    """The N best keys of STORE, by a numeric column descending, ties by key."""
    _read(ctx, as_json, lambda q: q.top(store, n=n, by=by))


@click.command("rank")
@click.argument("store")
@click.argument("key")
@click.option("--by", default=None, help="Numeric value column (default: the store's leaderboard column).")
@json_option
@click.pass_context
@_reported
def rank_cmd(ctx: click.Context, store: str, key: str, by: str | None, as_json: bool) -> None:
    """The 1-based rank of KEY in STORE (the position `top` would list it at)."""
    _read(ctx, as_json, lambda q: q.rank(store, key, by=by))


@click.command("range")
@click.argument("store")
@click.argument("from_key", metavar="FROM")
@click.argument("to_key", metavar="TO")
@click.option("--limit", default=None, type=click.IntRange(min=1), help="At most this many keys.")
@json_option
@click.pass_context
@_reported
def range_cmd(ctx: click.Context, store: str, from_key: str, to_key: str, limit: int | None, as_json: bool) -> None:
    """Keys of STORE from FROM to TO inclusive, in key order."""
    _read(ctx, as_json, lambda q: q.range(store, from_key, to_key, limit=limit))


@click.command("all")
@click.argument("store")
@click.option("--limit", default=None, type=click.IntRange(min=1), help="At most this many keys.")
@json_option
@click.pass_context
@_reported
def all_cmd(ctx: click.Context, store: str, limit: int | None, as_json: bool) -> None:
    """Every key of STORE in key order."""
    _read(ctx, as_json, lambda q: q.all(store, limit=limit))


@click.command("windows")
@click.argument("store")
@click.argument("key", required=False)
@click.option("--from", "time_from", default=None, help="Earliest window start (epoch ms or ISO-8601).")
@click.option("--to", "time_to", default=None, help="Latest window start (epoch ms or ISO-8601).")
@click.option("--limit", default=None, type=click.IntRange(min=1), help="At most this many windows.")
@json_option
@click.pass_context
@_reported
def windows_cmd(ctx: click.Context, store: str, key: str | None, time_from: str | None, time_to: str | None,
                limit: int | None, as_json: bool) -> None:
    """Windows of KEY in window STORE whose start lies in [--from, --to], by start (WindowStore.fetch);
    without KEY, every key's windows in range by (start, key) (fetchAll)."""
    _read(ctx, as_json, lambda q: q.windows(store, key, time_from, time_to, limit))


@click.command("sessions")
@click.argument("store")
@click.argument("key")
@click.option("--earliest-end", default=None, help="Sessions ending at or after (epoch ms or ISO-8601).")
@click.option("--latest-start", default=None, help="Sessions starting at or before (epoch ms or ISO-8601).")
@json_option
@click.pass_context
@_reported
def sessions_cmd(ctx: click.Context, store: str, key: str, earliest_end: str | None, latest_start: str | None,
                 as_json: bool) -> None:
    """Sessions of KEY in session STORE with end >= --earliest-end and start <= --latest-start, by
    start (SessionStore.findSessions)."""
    _read(ctx, as_json, lambda q: q.sessions(store, key, earliest_end, latest_start))


@click.command("sql")
@click.argument("query")
@json_option
@click.pass_context
@_reported
def sql_cmd(ctx: click.Context, query: str, as_json: bool) -> None:
    """One read-only statement (SELECT, WITH, SHOW, DESCRIBE, EXPLAIN) over the current snapshot."""
    _read(ctx, as_json, lambda q: q.sql(query))


# -- snapshot group ------------------------------------------------------------------------------
@click.group("snapshot")
def snapshot() -> None:
    """Publish and list the DuckDB snapshots that serve interactive queries."""


@snapshot.command("publish")
@click.option("--store", "store_names", multiple=True,
              help="Rebuild only this store (repeatable); the others are carried over from the current snapshot.")
@json_option
@click.pass_context
@_reported
def publish_cmd(ctx: click.Context, store_names: tuple[str, ...], as_json: bool) -> None:
    """Build a new snapshot from the stores' changelogs and make it current."""
    from deltastate.infra.spark import get_spark
    from deltastate.snapshot import describe, publish_snapshot
    from deltastate.stores import load_store

    settings = _settings(ctx)
    stores = [load_store(settings, name) for name in store_names] or None
    info = publish_snapshot(get_spark(settings, "deltastate-snapshot"), settings, stores)
    if as_json:
        click.echo(json.dumps(describe(info)))
        return
    click.echo(f"published snapshot {info.version}: {info.path}")
    rows = [{"store": s.store, "type": s.store_type, "rows": s.row_count,
             "changelog_version": s.changelog_version, "committed_at": s.changelog_committed_at}
            for s in info.stores]
    emit(["store", "type", "rows", "changelog_version", "committed_at"], rows, False)


@snapshot.command("list")
@json_option
@click.pass_context
@_reported
def list_cmd(ctx: click.Context, as_json: bool) -> None:
    """Snapshots on disk, oldest first; `*` marks the current one."""
    from deltastate.snapshot import describe, list_snapshots

    infos = list_snapshots(_settings(ctx))
    if as_json:
        for info in infos:
            click.echo(json.dumps(describe(info)))
        return
    if not infos:
        click.echo("no snapshot published yet; run `deltastate snapshot publish`")
        return
    rows = [{"": "*" if i.current else "", "version": i.version, "published_at": i.published_at,
             "stores": ", ".join(f"{s.store}={s.row_count}" for s in i.stores), "file": i.path.name}
            for i in infos]
    emit(["", "version", "published_at", "stores", "file"], rows, False)


QUERY_COMMANDS = (get_cmd, top_cmd, rank_cmd, range_cmd, all_cmd, windows_cmd, sessions_cmd, sql_cmd)


def register(cli_group: click.Group) -> None:
    """Add the query commands and the `snapshot` group to the main CLI group."""
    for command in (*QUERY_COMMANDS, snapshot):
        cli_group.add_command(command)


__all__ = ["format_table", "register", "snapshot", "QUERY_COMMANDS"]
