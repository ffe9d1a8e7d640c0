"""`deltastate get|top|rank|range|all|windows|sessions|sql` (interactive queries over the current
snapshot) and `deltastate snapshot publish|list`. Times (--from, --to, --earliest-end,
--latest-start) are epoch millis or ISO-8601, UTC when no zone is given.

Every store read takes --consistency and --schema-version and reads through the query layer's
reader (query/consistency.py), as the REST service does. Output (cli/output.py): an aligned table of
the store key and values (--meta adds each row's bookkeeping), name/value lines for a single get, or
with --json every column as one JSON object per line. Exit status: 0 on success, 1 when the key is
not found (`not found: ...` on stderr), 2 for any other deltastate error (`error: ...`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import click

from deltastate.cli.errors import reported as _reported
from deltastate.cli.errors import settings_of as _settings
from deltastate.cli.output import emit, show_read

if TYPE_CHECKING:
    from deltastate.query.consistency import Pinned
    from deltastate.query.result import QueryResult

F = TypeVar("F", bound=Callable[..., Any])


json_option = click.option("--json", "as_json", is_flag=True, help="One JSON object per line, every column.")


# -- how every read runs ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Answer:
    """What a read answered: its rows (a QueryResult's, or latest rows) and notes for the footer."""

    columns: list[str]
    rows: list[dict[str, Any]]
    notes: tuple[str, ...] = ()


def read_options(point_read: bool = False) -> Callable[[F], F]:
    """The options every store read takes: --consistency, --schema-version, --meta and --json."""
    levels = "snapshot|committed|latest" if point_read else "snapshot|committed"
    latest = "; latest: plus the source records the stream has not committed yet" if point_read else ""

    def add(func: F) -> F:
        for option in reversed((
            click.option("--consistency", type=click.Choice(levels.split("|")), default="snapshot",
                         show_default=True, help="snapshot: the published snapshot; committed: plus the changelog "
                                                 f"commits after it{latest}."),
            click.option("--schema-version", type=click.IntRange(min=1), default=None,
                         help="Answer in this value schema version's shape (default: the version the snapshot "
                              "holds)."),
            click.option("--meta", is_flag=True, help="Also show each row's bookkeeping: source partition and "
                                                      "offset, batch id, event and write time (--json has them)."),
            json_option,
        )):
            func = option(func)
        return func

    return add


def _read(ctx: click.Context, store: str, flags: dict[str, Any], answer: Callable[[Pinned], Answer], *,
          ranked: bool = False, single: bool = False) -> None:
    """One read through the query layer's reader (query/consistency.py, as the REST service reads):
    the current snapshot, at the consistency and schema version asked, then printed by show_read."""
    from deltastate.query.consistency import ConsistentReads, served_version, shape_columns, shape_row
    from deltastate.query.reader import SnapshotReader
    from deltastate.query.reads import Queries

    settings = _settings(ctx)
    consistency, schema_version = flags["consistency"], flags["schema_version"]
    reads = ConsistentReads(settings)
    try:
        # One read per process: DuckDB answers it sooner than the read index can be mapped.
        queries = Queries(settings, SnapshotReader(settings, use_index=False))
        with queries, reads.reading(queries, queries.reader.snapshot, [store], consistency, schema_version) as pinned:
            got = answer(pinned)
            definition = pinned.queries.store(store)
            served = served_version(definition, schema_version)
            columns = shape_columns(definition, got.columns, served)
            rows = [shape_row(definition, row, served) for row in got.rows]
            notes = [*got.notes]
            if consistency != "snapshot":
                reached = "" if pinned.fresh_to is None else f" through changelog version {pinned.fresh_to}"
                notes.insert(0, f"{consistency}{reached}")
            if schema_version is not None:
                notes.append(f"schema version {served}")
            show_read(columns, rows, snapshot_version=pinned.snapshot.version, as_json=flags["as_json"],
                      meta=flags["meta"], ranked=ranked, single=single, notes=notes)
    finally:
        reads.close()


def _result(result: QueryResult) -> Answer:
    return Answer(result.columns, result.rows)


# -- query commands ------------------------------------------------------------------------------
@click.command("get")
@click.argument("store")
@click.argument("key")
@read_options(point_read=True)
@click.pass_context
@_reported
def get_cmd(ctx: click.Context, store: str, key: str, **flags: Any) -> None:
    """The value of KEY in STORE."""

    def answer(pinned: Pinned) -> Answer:
        if pinned.latest is None:
            return _result(pinned.queries.get(store, key))
        from deltastate.errors import KeyNotFoundError

        pinned.latest.read_to_end(_settings(ctx).kafka_bootstrap, store)
        rows, position = pinned.latest.get_many(pinned.queries, store, [key])
        if not rows:
            raise KeyNotFoundError(store, key)
        read = {str(p) for p in position.read_to}  # the key's partition, not every partition's offsets
        applied = ", ".join(f"partition {p}: committed offset {o['committed_offset']}, applied to "
                            f"{o['latest_offset_applied']}" for p, o in position.body().items() if p in read)
        return Answer(list(rows[0]), rows, (applied,))

    _read(ctx, store, flags, answer, single=True)


@click.command("top")
@click.argument("store")
@click.option("--n", "n", default=10, show_default=True, type=click.IntRange(min=1), help="How many keys.")
@click.option("--by", default=None, help="Numeric value column (default: the store's leaderboard column).")
@read_options()
@click.pass_context
@_reported
def top_cmd(ctx: click.Context, store: str, n: int, by: str | None, **flags: Any) -> None:
    """The N best keys of STORE, by a numeric column descending, ties by key."""
    _read(ctx, store, flags, lambda p: _result(p.queries.top(store, n=n, by=by)), ranked=True)


@click.command("rank")
@click.argument("store")
@click.argument("key")
@click.option("--by", default=None, help="Numeric value column (default: the store's leaderboard column).")
@read_options()
@click.pass_context
@_reported
def rank_cmd(ctx: click.Context, store: str, key: str, by: str | None, **flags: Any) -> None:
    """The 1-based rank of KEY in STORE (the position `top` would list it at)."""
    _read(ctx, store, flags, lambda p: _result(p.queries.rank(store, key, by=by)))


@click.command("range")
@click.argument("store")
@click.argument("from_key", metavar="FROM")
@click.argument("to_key", metavar="TO")
@click.option("--limit", default=None, type=click.IntRange(min=1), help="At most this many keys.")
@read_options()
@click.pass_context
@_reported
def range_cmd(ctx: click.Context, store: str, from_key: str, to_key: str, limit: int | None, **flags: Any) -> None:
    """Keys of STORE from FROM to TO inclusive, in key order."""
    _read(ctx, store, flags, lambda p: _result(p.queries.range(store, from_key, to_key, limit=limit)))


@click.command("all")
@click.argument("store")
@click.option("--limit", default=None, type=click.IntRange(min=1), help="At most this many keys.")
@read_options()
@click.pass_context
@_reported
def all_cmd(ctx: click.Context, store: str, limit: int | None, **flags: Any) -> None:
    """Every key of STORE in key order."""
    _read(ctx, store, flags, lambda p: _result(p.queries.all(store, limit=limit)))


@click.command("windows")
@click.argument("store")
@click.argument("key", required=False)
@click.option("--from", "time_from", default=None, help="Earliest window start (epoch ms or ISO-8601).")
@click.option("--to", "time_to", default=None, help="Latest window start (epoch ms or ISO-8601).")
@click.option("--limit", default=None, type=click.IntRange(min=1), help="At most this many windows.")
@read_options()
@click.pass_context
@_reported
def windows_cmd(ctx: click.Context, store: str, key: str | None, time_from: str | None, time_to: str | None,
                limit: int | None, **flags: Any) -> None:
    """Windows of KEY in window STORE whose start lies in [--from, --to], by start (WindowStore.fetch);
    without KEY, every key's windows in range by (start, key) (fetchAll)."""
    _read(ctx, store, flags, lambda p: _result(p.queries.windows(store, key, time_from, time_to, limit)))


@click.command("sessions")
@click.argument("store")
@click.argument("key")
@click.option("--earliest-end", default=None, help="Sessions ending at or after (epoch ms or ISO-8601).")
@click.option("--latest-start", default=None, help="Sessions starting at or before (epoch ms or ISO-8601).")
@read_options()
@click.pass_context
@_reported
def sessions_cmd(ctx: click.Context, store: str, key: str, earliest_end: str | None, latest_start: str | None,
                 **flags: Any) -> None:
    """Sessions of KEY in session STORE with end >= --earliest-end and start <= --latest-start, by
    start (SessionStore.findSessions)."""
    _read(ctx, store, flags, lambda p: _result(p.queries.sessions(store, key, earliest_end, latest_start)))


@click.command("sql")
@click.argument("query")
@json_option
@click.pass_context
@_reported
def sql_cmd(ctx: click.Context, query: str, as_json: bool) -> None:
    """One read-only statement (SELECT, WITH, SHOW, DESCRIBE, EXPLAIN) over the current snapshot."""
    from deltastate.query.reads import Queries

    with Queries(_settings(ctx)) as queries:
        result = queries.sql(query)
    n = len(result.rows)
    emit(result.columns, result.rows, as_json, f"({n} row{'s' if n != 1 else ''}, snapshot {result.snapshot_version})")


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


__all__ = ["QUERY_COMMANDS", "register", "snapshot"]
