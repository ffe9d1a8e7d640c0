"""Runs the service under uvicorn (what `deltastate serve` calls): one process, or several worker
processes sharing the port. Workers share the snapshots' read indexes through the page cache (they
are memory-mapped files), so a worker costs little memory beyond its interpreter."""

from __future__ import annotations

import os

from fastapi import FastAPI

from deltastate.config import Settings, load_settings
from deltastate.service.app import create_app
from deltastate.service.options import ServiceOptions


def app_from_env() -> FastAPI:
    """The app of one worker process: settings and options from the environment serve() set."""
    return create_app(load_settings(), ServiceOptions.from_env())


def serve(settings: Settings, host: str = "127.0.0.1", port: int = 8000, options: ServiceOptions | None = None,
          log_level: str = "info", workers: int = 1) -> None:
    import uvicorn

    if workers <= 1:
        app = create_app(settings, options or ServiceOptions.from_env())
        uvicorn.run(app, host=host, port=port, log_level=log_level, access_log=False)
        return
    # Worker processes are started fresh by uvicorn and build their app from the environment.
    os.environ.update(settings.to_env())
    if options is not None:
        os.environ.update(options.to_env())
    uvicorn.run("deltastate.service.server:app_from_env", factory=True, host=host, port=port,
                log_level=log_level, access_log=False, workers=workers)


__all__ = ["app_from_env", "serve"]
