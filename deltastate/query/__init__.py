"""Interactive queries over the current DuckDB snapshot: read-only, locked-down connections
(reader.py), the reads (reads.py, made of indexed.py and scans.py over source.py), their answers
(result.py) and the SQL guard (guard.py)."""

from deltastate.query.guard import check_read_only
from deltastate.query.reader import Snapshot, SnapshotReader
from deltastate.query.reads import Queries
from deltastate.query.result import QueryResult

__all__ = ["Queries", "QueryResult", "Snapshot", "SnapshotReader", "check_read_only"]
