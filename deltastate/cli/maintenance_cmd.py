"""`deltastate compact STORE` and `deltastate cleanup STORE`: changelog upkeep from the command line
(Airflow calls the same functions in deltastate.maintenance)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import click

from deltastate.cli.errors import reported, settings_of
from deltastate.config import Settings


@contextmanager
def _process_stdout_to_stderr() -> Iterator[None]:
    """While the job runs, file descriptor 1 is stderr: the JVM it starts inherits that, so what Delta
    prints to the console (VACUUM's "Deleted N files ...") never mixes with the report on stdout."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def _figures(fig) -> str:
    if fig is None:
        return "-"
    return f"{fig.records:,} records, {fig.files:,} files, {fig.bytes:,} bytes (version {fig.version})"


@click.command()
@click.argument("store")
@click.option("--no-vacuum", is_flag=True, help="Rewrite and OPTIMIZE only.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as one JSON object.")
@click.pass_context
@reported
def compact(ctx: click.Context, store: str, no_vacuum: bool, as_json: bool) -> None:
    """Compact STORE's changelog: latest record per store key, old tombstones dropped, files merged."""
    from deltastate.maintenance import compact_store

    with _process_stdout_to_stderr():
        report = compact_store(settings_of(ctx), store, vacuum=not no_vacuum)
    if as_json:
        click.echo(json.dumps(report.to_dict(), default=str))
        return
    click.echo(f"compact {store}: " + (f"skipped ({report.skipped})" if report.skipped else "rewritten"))
    click.echo(f"  before: {_figures(report.before)}; dirty ratio {report.dirty_ratio_before:.3f}")
    after_ratio = "-" if report.dirty_ratio_after is None else f"{report.dirty_ratio_after:.3f}"
    click.echo(f"  after:  {_figures(report.after)}; dirty ratio {after_ratio}")
    click.echo(f"  dropped {report.records_dropped:,} records ({report.tombstones_dropped:,} tombstones) in "
               f"{report.segments_rewritten} segments; OPTIMIZE merged {report.files_optimized} files"
               f"{_side(report.side_files_optimized)}; "
               f"VACUUM retention {report.vacuum_retention_hours} h, {report.files_vacuumed} files deleted; "
               f"{report.seconds:.1f} s")


def _side(removed: dict[str, int] | None) -> str:
    return "".join(f", {n} of {table}" for table, n in (removed or {}).items())


@click.command()
@click.argument("store")
@click.option("--topic", default=None, help="Source topic for ttl tombstones (default: the store's).")
@click.option("--now-ms", type=int, default=None, help="Decide expiry as of this epoch-ms time (default: now).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as one JSON object.")
@click.pass_context
@reported
def cleanup(ctx: click.Context, store: str, topic: str | None, now_ms: int | None, as_json: bool) -> None:
    """Expire STORE's old entries (TTL, window retention, session expiry) by tombstones."""
    from deltastate.maintenance import cleanup_store

    report = cleanup_store(settings_of(ctx), store, now_ms=now_ms, topic=topic)
    if as_json:
        click.echo(json.dumps(report.to_dict(), default=str))
        return
    if report.skipped:
        click.echo(f"cleanup {store}: skipped ({report.skipped})")
        return
    click.echo(f"cleanup {store} ({report.store_type}, changelog version {report.read_version}): "
               f"{report.expired_keys:,} keys, {report.expired_windows:,} windows, "
               f"{report.expired_sessions:,} sessions expired; {report.tombstones_written:,} tombstones written; "
               f"{report.seconds:.1f} s")
    if _expires_by_ttl(settings_of(ctx), store):
        click.echo(f"  ttl: {report.candidates:,} keys past the ttl, {report.spared:,} spared (updated in the "
                   f"{report.tail_records:,} records not yet applied), {len(report.raced)} raced")


def _expires_by_ttl(settings: Settings, store: str) -> bool:
    """Whether the store's cleanup is TTL (its report has the ttl figures), as its backend says."""
    from deltastate.stores import load_store
    from deltastate.stores.backends import TTL, backend_of

    return backend_of(load_store(settings, store)).expiry == TTL


def register(cli: click.Group) -> None:
    cli.add_command(compact)
    cli.add_command(cleanup)
