"""The session store (Kafka Streams' SessionWindows over a SessionStore): one entry per key and
session, found by findSessions; retention is the session spec's, and cleanup calls it expiry."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from deltastate.stores.backends.base import Read
from deltastate.stores.backends.windowed import WindowedBackend, windowed_reads

if TYPE_CHECKING:
    from deltastate.stores.definition import SessionSpec, StoreDefinition, WindowSpec


@dataclass(frozen=True)
class SessionBackend(WindowedBackend):
    kind: ClassVar[str] = "session"
    store_type: ClassVar[str] = "session"
    definition_block: ClassVar[str | None] = "session"
    reads: ClassVar[frozenset[Read]] = windowed_reads("sessions")
    read_hint: ClassVar[str] = "use sessions"
    expired_counter: ClassVar[str] = "expired_sessions"
    cleanup_lineage_id: ClassVar[str | None] = "deltastate-cleanup/session-expiry"

    def retention_spec(self, store: StoreDefinition) -> WindowSpec | SessionSpec | None:
        return store.session


SESSION_BACKEND = SessionBackend()
