"""Which version of a store may write: the rule every run checks before it starts, and a continuous
run checks while it runs, so that a migration's cutover or rollback stops the version it retires.

A version may write when it is current and no cutover is taking the store off it, or when it is
the version a migration is building (phase building, or cutover: the new version processes the
remainder while the old one is stopped).
"""

from __future__ import annotations

from deltastate.config import Settings
from deltastate.errors import DeltastateError
from deltastate.stores.current import read_control
from deltastate.stores.definition import StoreDefinition

BUILDING, CUTOVER, CUT_OVER, ROLLED_BACK = "building", "cutover", "cut-over", "rolled-back"


class FencedVersionError(DeltastateError):
    def __init__(self, store: str, version: int, reason: str) -> None:
        super().__init__(reason)
        self.store = store
        self.version = version


def fenced(settings: Settings, store: StoreDefinition) -> str | None:
    """Why `store`'s version must not write now; None when it may."""
    control = read_control(settings, store.name)
    current = int(control.get("current", store.versions[0]))
    migration = control.get("migration") or {}
    version = store.value_version
    if version == current:
        if migration.get("phase") == CUTOVER and migration.get("from") == version:
            return (f"store {store.name!r}: value schema version {version} is being cut over to version "
                    f"{migration.get('to')}; its stream stops here and version {migration.get('to')} continues")
        return None
    if migration.get("to") == version and migration.get("phase") in (BUILDING, CUTOVER):
        return None
    return (f"store {store.name!r}: value schema version {version} is not current (current: {current}) and no "
            f"migration is building it; run the current version (`deltastate migrate status {store.name}`)")


def check_may_write(settings: Settings, store: StoreDefinition) -> None:
    reason = fenced(settings, store)
    if reason is not None:
        raise FencedVersionError(store.name, store.value_version, reason)
