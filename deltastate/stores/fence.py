"""Which version of a store may write: the rule every run checks before it starts, and a continuous
run checks while it runs, so that a migration's cutover or rollback stops the version it retires.

A version may write when it is current and no cutover is taking the store off it, or when it is
the version a migration is building (phase building, or cutover: the new version processes the
remainder while the old one is stopped).
"""

from __future__ import annotations

from deltastate.config import Settings
from deltastate.errors import DeltastateError
from deltastate.stores.current import read_record
from deltastate.stores.definition import StoreDefinition

BUILDING, CUTOVER, CUT_OVER, ROLLED_BACK, RETIRED = "building", "cutover", "cut-over", "rolled-back", "retired"


class FencedVersionError(DeltastateError):
    def __init__(self, store: str, version: int, reason: str) -> None:
        super().__init__(reason)
        self.store = store
        self.version = version


def fenced(settings: Settings, store: StoreDefinition) -> str | None:
    """Why `store`'s version must not write now; None when it may."""
    record = read_record(settings, store.name)
    current = store.versions[0] if record.current is None else record.current
    migration = record.migration
    version = store.value_version
    if version == current:
        if migration is not None and migration.phase == CUTOVER and migration.from_version == version:
            return (f"store {store.name!r}: value schema version {version} is being cut over to version "
                    f"{migration.to_version}; its stream stops here and version {migration.to_version} continues")
        return None
    if migration is not None and migration.to_version == version and migration.phase in (BUILDING, CUTOVER):
        return None
    return (f"store {store.name!r}: value schema version {version} is not current (current: {current}) and no "
            f"migration is building it; run the current version (`deltastate migrate status {store.name}`)")


def check_may_write(settings: Settings, store: StoreDefinition) -> None:
    reason = fenced(settings, store)
    if reason is not None:
        raise FencedVersionError(store.name, store.value_version, reason)
