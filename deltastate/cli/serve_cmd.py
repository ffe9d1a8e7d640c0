"""`deltastate serve`: the interactive-query REST service (FastAPI + uvicorn; OpenAPI at /docs)."""

from __future__ import annotations

import click

from deltastate.cli.errors import reported as _reported
from deltastate.cli.errors import settings_of as _settings


@click.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to listen on.")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(1, 65535))
@click.option("--workers", default=1, show_default=True, type=click.IntRange(1, 64),
              help="Server processes sharing the port (one per core serves the most reads).")
@click.option("--advertise", default=None, metavar="URL",
              help="Join a query tier as this URL (http://host:port, as the other instances reach this one); "
                   "DELTASTATE_ADVERTISED_URL does the same. Without it the instance answers every read itself.")
@click.option("--log-level", default="info", show_default=True,
              type=click.Choice(["critical", "error", "warning", "info", "debug"]))
@click.pass_context
@_reported
def serve(ctx: click.Context, host: str, port: int, workers: int, advertise: str | None, log_level: str) -> None:
    """Serve the stores over REST from the current snapshot, following new snapshots as they are
    published. DELTASTATE_API_TOKEN turns on bearer-token auth; DELTASTATE_SQL_TIMEOUT and
    DELTASTATE_SQL_MAX_ROWS bound POST /sql. Instances started with --advertise share the stores'
    partitions through a Kafka consumer group and answer any read, forwarding it to the instance
    that owns the key (docs/operations.md)."""
    import os

    from deltastate.service.options import ServiceOptions
    from deltastate.service.server import serve as run

    env = dict(os.environ)
    if advertise:
        env["DELTASTATE_ADVERTISED_URL"] = advertise
    run(_settings(ctx), host=host, port=port, options=ServiceOptions.from_env(env), log_level=log_level,
        workers=workers)
