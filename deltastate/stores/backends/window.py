"""The window store (Kafka Streams' TimeWindows over a WindowStore): one entry per key and window,
fetched by window start; retention is the window spec's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from deltastate.stores.backends.base import Read
from deltastate.stores.backends.windowed import WindowedBackend, windowed_reads

if TYPE_CHECKING:
    from deltastate.stores.definition import SessionSpec, StoreDefinition, WindowSpec


@dataclass(frozen=True)
class WindowBackend(WindowedBackend):
    kind: ClassVar[str] = "window"
    store_type: ClassVar[str] = "window"
    definition_block: ClassVar[str | None] = "window"
    reads: ClassVar[frozenset[Read]] = windowed_reads("windows")
    read_hint: ClassVar[str] = "use windows"
    expired_counter: ClassVar[str] = "expired_windows"
    cleanup_lineage_id: ClassVar[str | None] = "deltastate-cleanup/window-retention"

    def retention_spec(self, store: StoreDefinition) -> WindowSpec | SessionSpec | None:
        return store.window


WINDOW_BACKEND = WindowBackend()
