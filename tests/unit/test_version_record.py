"""The store-version record: a frozen model read and written by stores/current.py, in the file format
every deltastate has written (keys "current", "migration" with "from"/"to", "rates", "retired")."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from deltastate.config import load_settings
from deltastate.stores.current import (
    BuildRate,
    Migration,
    VersionRecord,
    control_path,
    current_version,
    read_record,
    write_record,
)

# A file as the migration steps write it after a cutover, a rollback and a retire of an earlier migration.
ON_DISK = {
    "current": 2,
    "migration": {"from": 1, "to": 2, "phase": "cut-over", "started_at": "2026-01-01T00:00:00+00:00",
                  "cutover_at": "2026-01-01T00:05:00+00:00", "plan": {"build": "seed", "fields": []},
                  "seeded_rows": 7, "seed_offsets": {"0": 12, "3": 4}, "checks": {"success": True}},
    "rates": {"seed": {"records": 1000, "seconds": 2.5}},
    "retired": [0],
}


@pytest.fixture()
def settings(tmp_path: Path):
    return load_settings({"DELTASTATE_HOME": str(tmp_path / "home"), "DELTASTATE_STORAGE": str(tmp_path / "data")})


def test_existing_file_reads_typed(settings) -> None:
    path = control_path(settings, "s")
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(ON_DISK))
    record = read_record(settings, "s")
    assert record.current == 2 and record.retired == (0,)
    assert record.rates == {"seed": BuildRate(1000, 2.5)}
    migration = record.migration
    assert (migration.from_version, migration.to_version, migration.phase, migration.build) == (1, 2, "cut-over", "seed")
    assert migration.seed_offsets == {0: 12, 3: 4} and migration.seeded_rows == 7
    assert migration.rolled_back_at is None
    assert current_version(settings, "s") == 2


def test_round_trip_keeps_the_keys_on_disk(settings) -> None:
    path = control_path(settings, "s")
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(ON_DISK))
    write_record(settings, "s", read_record(settings, "s"))
    assert json.loads(path.read_text()) == ON_DISK


def test_no_file_is_the_empty_record(settings) -> None:
    assert read_record(settings, "none") == VersionRecord()
    assert current_version(settings, "none") is None


def test_changes_by_replace(settings) -> None:
    started = VersionRecord(current=1, migration=Migration(1, 2, "building", plan={"build": "replay"}))
    write_record(settings, "s", started)
    with pytest.raises(dataclasses.FrozenInstanceError):
        started.current = 2  # type: ignore[misc]
    record = read_record(settings, "s")
    assert record == started
    cut = dataclasses.replace(record, current=2, migration=dataclasses.replace(record.migration, phase="cut-over"))
    write_record(settings, "s", cut)
    on_disk = json.loads(control_path(settings, "s").read_text())
    # Keys without a value are not written, as before: no "rates" or "retired" until a step sets them.
    assert on_disk == {"current": 2, "migration": {"from": 1, "to": 2, "phase": "cut-over", "plan": {"build": "replay"}}}


@pytest.mark.parametrize("text", ['{"current": 2, "migration": {"to": 2}}', "{not json", '{"rates": {"seed": 3}}'])
def test_an_unreadable_record_is_refused_naming_the_store_and_file(tmp_path: Path, text: str) -> None:
    from deltastate.errors import StoreDefinitionError

    settings = load_settings({"DELTASTATE_HOME": str(tmp_path)})
    path = control_path(settings, "player_stats")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    with pytest.raises(StoreDefinitionError, match=rf"store 'player_stats': its version record {path} is unreadable"):
        read_record(settings, "player_stats")
    with pytest.raises(StoreDefinitionError):
        current_version(settings, "player_stats")
