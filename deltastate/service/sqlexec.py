"""POST /sql: one read-only statement with a time limit and a row limit.

The guard (query/guard.py) refuses anything but a single read before it runs; the locked-down,
read-only connection is the second line. The time limit interrupts the request's own DuckDB cursor
from a timer thread, so a runaway statement stops without touching other requests; the row limit
refuses (never truncates) an answer larger than allowed.
"""

from __future__ import annotations

import threading

from deltastate.query.errors import SqlLimitError
from deltastate.query.reader import Snapshot
from deltastate.query.reads import Queries
from deltastate.query.result import QueryResult


def run_sql(queries: Queries, snap: Snapshot, statement: str, timeout_s: float, max_rows: int) -> QueryResult:
    """Run statement on snap (a per-request cursor) within the limits; SqlLimitError otherwise."""
    fired = threading.Event()

    def stop() -> None:
        fired.set()
        snap.con.interrupt()

    timer = threading.Timer(timeout_s, stop)
    timer.daemon = True
    timer.start()
    try:
        return queries.at(snap).sql(statement, max_rows=max_rows)
    except SqlLimitError:
        raise
    except Exception as exc:
        if fired.is_set():
            raise SqlLimitError(f"the statement ran longer than {timeout_s:g}s (the time limit) and was "
                                "interrupted") from exc
        raise
    finally:
        timer.cancel()


__all__ = ["run_sql"]
