"""What window and session stores share: entries keyed by (key, window_start, window_end), state kept
in the changelog (the engine reads it back, so restore rebuilds only the source offsets), entries
bounded by retention and expired by changelog tombstones."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from deltastate.stores.backends.base import RETENTION, WINDOWED, Engine, Expiry, Family, Read, RestoreMode, StoreBackend
from deltastate.stores.backends.columns import EVENTS, KEY_AND_BOUNDS

if TYPE_CHECKING:
    from deltastate.stores.definition import StoreDefinition


@dataclass(frozen=True)
class WindowedBackend(StoreBackend):
    family: ClassVar[Family] = WINDOWED
    key_column_types: ClassVar[tuple[tuple[str, str], ...]] = KEY_AND_BOUNDS
    entry_count_columns: ClassVar[tuple[str, ...]] = (EVENTS,)
    spark_state: ClassVar[bool] = False
    engine: ClassVar[Engine] = "windowed"
    read_index: ClassVar[bool] = False  # no leaderboard, no point read by key alone
    restore_mode: ClassVar[RestoreMode] = "partial"
    expiry: ClassVar[Expiry] = RETENTION

    def latest_refusal(self, store: StoreDefinition) -> str | None:
        # Folding a window or session entry needs stream time and lateness, which only the engine has.
        return f"store {store.name!r} is a {store.type} store: latest applies to key-value stores; use committed"


def windowed_reads(fetch: Read) -> frozenset[Read]:
    """The reads of a windowed store: its own fetch, and range/all over the store key."""
    return frozenset({fetch, "range", "all"})
