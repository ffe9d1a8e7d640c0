"""The key-value store without changelog (`changelog.enabled: false`, Kafka Streams'
withLoggingDisabled): the state lives only in Spark's state store. Snapshots read that state store,
restore replays the source topic, and reads that need the changelog (fresh, latest) are refused."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from deltastate.stores.backends.base import FROM_STATE_STORE, RestoreMode, SnapshotSource, no_changelog_message
from deltastate.stores.backends.keyvalue import KeyValueBackend

if TYPE_CHECKING:
    from deltastate.stores.definition import StoreDefinition


@dataclass(frozen=True)
class UnloggedBackend(KeyValueBackend):
    kind: ClassVar[str] = "unlogged"
    has_changelog: ClassVar[bool] = False
    restore_mode: ClassVar[RestoreMode] = "replay"
    snapshot_source: ClassVar[SnapshotSource] = FROM_STATE_STORE
    # A new version is seeded from the changelog, which this store does not write.
    migratable: ClassVar[bool] = False

    def latest_refusal(self, store: StoreDefinition) -> str | None:
        return no_changelog_message(store)

    def fresh_refusal(self, store: StoreDefinition) -> str | None:
        return no_changelog_message(store)


UNLOGGED_BACKEND = UnloggedBackend()
