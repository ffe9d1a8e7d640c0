"""Runs the service under uvicorn (what `deltastate serve` calls)."""

from __future__ import annotations

from deltastate.config import Settings
from deltastate.service.app import create_app
from deltastate.service.options import ServiceOptions


def serve(settings: Settings, host: str = "127.0.0.1", port: int = 8000, options: ServiceOptions | None = None,
          log_level: str = "info") -> None:
    import uvicorn

    app = create_app(settings, options or ServiceOptions.from_env())
    uvicorn.run(app, host=host, port=port, log_level=log_level, access_log=False)


__all__ = ["serve"]
