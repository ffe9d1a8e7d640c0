"""How `make test` shares test files between its workers (tests/support/scheduling.py)."""

from __future__ import annotations

from support.scheduling import LONG_FILES, SPLIT_BY_PARAMETER, rank_of, unit_of

CONTRACT = SPLIT_BY_PARAMETER[0]


def test_a_file_is_one_unit() -> None:
    assert unit_of("tests/integration/test_restore.py::test_full[a-b]") == "tests/integration/test_restore.py"
    assert unit_of("tests/unit/test_x.py::TestY::test_z") == "tests/unit/test_x.py"


def test_a_split_file_is_one_unit_per_parameter() -> None:
    rocksdb = unit_of(f"{CONTRACT}::TestStoreContract::test_put_creates_the_entry_counted_once[player_stats-rocksdb]")
    again = unit_of(f"{CONTRACT}::TestStoreContract::test_delete_removes_every_entry_of_the_key[player_stats-rocksdb]")
    memory = unit_of(f"{CONTRACT}::TestStoreContract::test_put_creates_the_entry_counted_once[player_stats-memory]")
    assert rocksdb == again == f"{CONTRACT}[player_stats-rocksdb]"
    assert memory == f"{CONTRACT}[player_stats-memory]"
    # Its tests without a parameter share one unit.
    assert unit_of(f"{CONTRACT}::TestStoreContract::test_the_runs_cover_every_backend") == CONTRACT


def test_long_files_first_in_their_order_then_split_units_then_the_rest() -> None:
    units = ["tests/unit/test_a.py", f"{CONTRACT}[trade_stats]", LONG_FILES[1], "tests/integration/test_b.py",
             LONG_FILES[0]]
    assert sorted(units, key=rank_of) == [LONG_FILES[0], LONG_FILES[1], f"{CONTRACT}[trade_stats]",
                                          "tests/unit/test_a.py", "tests/integration/test_b.py"]


def test_the_named_files_exist() -> None:
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    missing = [f for f in (*LONG_FILES, *SPLIT_BY_PARAMETER) if not (root / f).is_file()]
    assert not missing, missing
