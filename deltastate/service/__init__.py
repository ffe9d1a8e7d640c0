"""The interactive-query REST service: a FastAPI app over versioned DuckDB snapshots.

app.py (factory, middleware, error handling), routes.py (endpoints), state.py (what requests
share, the read path), snapshots.py (swaps, reference-counted), freshness.py (staleness),
answers.py (JSON, errors, cursors), sqlexec.py (SQL limits), metrics.py, auth.py, options.py,
server.py (uvicorn)."""

from deltastate.service.app import create_app
from deltastate.service.options import ServiceOptions

__all__ = ["ServiceOptions", "create_app"]
