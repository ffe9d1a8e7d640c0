"""The columns that identify a state entry, named once for the backends and the changelog layout.

A backend decides which of them a store's entries carry; changelog/layout.py re-exports them beside
the bookkeeping columns, so every table of a store (changelog, snapshot, seed) spells them alike.
"""

from __future__ import annotations

KEY = "key"
# Window and session stores key their state by (key, window_start, window_end), epoch millis, [start, end)
# as Kafka Streams' Windowed<K>; a session's bounds are its first and last event times.
WINDOW_START = "window_start"
WINDOW_END = "window_end"
WINDOW_COLUMNS: tuple[tuple[str, str], ...] = ((WINDOW_START, "bigint"), (WINDOW_END, "bigint"))
# How many events an entry of a window or session store aggregates: merging an entry with new events
# needs it (avg = sum / events) whatever value fields the store declares.
EVENTS = "events"
# Why a delete was written, in the changelog of an LRU store (max_entries): 'evicted' when the store
# dropped the least recently updated key to make room, null for a tombstone from the source.
DELETE_REASON = "reason"

# (name, Spark SQL type) of the store key of a key-value store and of a window or session store.
KEY_ONLY: tuple[tuple[str, str], ...] = ((KEY, "string"),)
KEY_AND_BOUNDS: tuple[tuple[str, str], ...] = ((KEY, "string"), *WINDOW_COLUMNS)
