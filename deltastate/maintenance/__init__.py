"""Changelog upkeep, like Kafka's log cleaner and retention: compaction (latest record per store key,
old tombstones dropped, small files merged, unreferenced files vacuumed) and cleanup (TTL, window
retention, session expiry, all as tombstones), restore of a checkpoint from the changelog, and
inspect (what a store is on disk). The CLI and the Airflow DAGs call the same functions.
"""

from deltastate.maintenance.cleanup import CleanupReport, cleanup_store
from deltastate.maintenance.compact import CompactionReport, compact_store
from deltastate.maintenance.stats import MaintenanceError, TableFigures

__all__ = ["CleanupReport", "CompactionReport", "MaintenanceError", "TableFigures", "cleanup_store", "compact_store"]
