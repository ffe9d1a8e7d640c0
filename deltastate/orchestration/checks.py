"""Python callables of the DAGs' non-Spark tasks (kept here so dags/ stays declarative)."""

from __future__ import annotations

import logging
from typing import Any

from deltastate.errors import DeltastateError

log = logging.getLogger(__name__)


class NotConfirmedError(DeltastateError):
    def __init__(self, store: str, action: str = "restore") -> None:
        super().__init__(f"store {store!r}: {action} not confirmed; trigger again with confirm = true")


def check_events(store_name: str, topic: str | None = None, per_partition: int = 500) -> dict[str, Any]:
    """Validate a sample of the newest events on the store's topic with the events suite.

    Reports, never blocks: records that fail are dead-lettered by the run with their reason, so the
    figures here (also in Data Docs) are an early warning, not a gate."""
    from deltastate.config import load_settings
    from deltastate.quality.frames import event_time_bounds, events_frame
    from deltastate.quality.validate import validate
    from deltastate.stores import load_store

    settings = load_settings()
    store = load_store(settings, store_name)
    frame = events_frame(settings, store, per_partition, topic=topic or None)
    report = validate(settings, "events", store, frame, event_time_bounds()).to_dict()
    if not report["success"]:
        log.warning("store %s: sampled events fail checks (they will be dead-lettered): %s", store_name,
                    report["failures"])
    log.info("store %s: events check %s", store_name, report)
    return report


def _confirmed(confirm: Any) -> bool:
    return confirm is True or str(confirm).lower() == "true"


def require_confirm(store_name: str, confirm: Any) -> str:
    if not _confirmed(confirm):
        raise NotConfirmedError(store_name)
    return store_name


# Migration steps that change nothing run unconfirmed; the others need the confirm box.
READ_ONLY_STEPS = ("plan", "status")


def choose_migration_step(store_name: str, action: str, confirm: Any) -> list[str]:
    """The task ids the migrate DAG runs for `action` (start makes its own plan first)."""
    if action not in READ_ONLY_STEPS and not _confirmed(confirm):
        raise NotConfirmedError(store_name, f"migrate {action}")
    log.info("store %s: migrate %s", store_name, action)
    return [action]
