"""Value schema versions: the derivation language, the rules a migration must follow (each refusal
names what is wrong and what to do instead) and reads shaped for an older version."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from deltastate.errors import StoreDefinitionError
from deltastate.stores.expression import ExpressionError, evaluate, field_names, parse
from deltastate.stores.parse import parse_store
from deltastate.stores.versions import check_servable, down_convert

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"


@pytest.mark.parametrize(("text", "values", "want"), [
    ("total_score / games", {"total_score": 10, "games": 4}, 2.5),
    ("total_score / games", {"total_score": 10, "games": 0}, None),
    ("total_score / games", {"total_score": None, "games": 2}, None),
    ("-(a - b) * 2 + 1.5", {"a": 1, "b": 4}, 7.5),
    ("a * 3 / (b + 1)", {"a": 2, "b": 2}, 2.0),
])
def test_a_derivation_evaluates_in_double_with_null_for_null_or_zero_division(text, values, want):
    assert evaluate(parse(text), values) == want


@pytest.mark.parametrize("text", ["games ** 2", "max(a, b)", "a.b", "a if b else c", "'x'", "a // b", "a <", "True + a"])
def test_a_derivation_outside_the_language_is_refused(text):
    with pytest.raises(ExpressionError):
        parse(text)


def test_field_names_of_a_derivation():
    assert field_names(parse("(total_score - best_score) / games + 1")) == {"total_score", "best_score", "games"}


def store_file(tmp_path: Path, migration: dict[str, Any] | None = None, v2_fields: list[dict] | None = None,
               edit=None) -> Path:
    """player_stats with one migration to a v2 schema written for the test."""
    schemas = tmp_path / "schemas"
    if not schemas.exists():
        shutil.copytree(SCHEMAS, schemas)
    fields = v2_fields if v2_fields is not None else [
        {"name": "games", "type": "long"}, {"name": "total_score", "type": "double"},
        {"name": "top_score", "type": "long"}, {"name": "last_played", "type": "long"},
        {"name": "avg_score", "type": "double"}]
    (schemas / "values" / "ps_test.v2.json").write_text(json.dumps({"version": 2, "fields": fields}))
    raw = yaml.safe_load((SCHEMAS / "stores" / "player_stats.yaml").read_text())
    raw["migrations"] = [migration if migration is not None else {
        "version": 2, "value_schema": "ps_test.v2", "rename": {"best_score": "top_score"},
        "derive": {"avg_score": "total_score / games"}}]
    if edit:
        edit(raw)
    path = schemas / "stores" / "player_stats.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def load(path: Path, version: int | None = 2):
    return parse_store(path.parents[1], "player_stats", path, version)


def base_migration(**changes: Any) -> dict[str, Any]:
    m = {"version": 2, "value_schema": "ps_test.v2", "rename": {"best_score": "top_score"},
         "derive": {"avg_score": "total_score / games"}}
    m.update(changes)
    return m


def test_version_two_is_built_from_version_one(tmp_path):
    path = store_file(tmp_path)
    v1, v2 = load(path, None), load(path)
    assert (v1.value_version, v1.storage, v1.versions) == (1, "player_stats", (1, 2))
    assert (v2.value_version, v2.storage) == (2, "player_stats.v2")
    assert {a.target for a in v2.aggregations} == {"games", "total_score", "top_score", "last_played"}
    assert v2.value_field("total_score").type == "double"
    assert [(d.target, d.expression) for d in v2.derived] == [("avg_score", "total_score / games")]
    [step] = v2.history
    assert step.widened == (("total_score", "long", "double"),) and step.renamed == (("best_score", "top_score"),)


@pytest.mark.parametrize(("migration", "v2_fields", "message"), [
    (base_migration(key_field="game_id"), None, "cannot change 'key_field'"),
    (base_migration(window={"size": "5s"}), None, "cannot change 'window'"),
    (base_migration(derive={"avg_score": "total_score / plays"}), None, "reads ['plays'], not aggregated fields"),
    (base_migration(derive={"avg_score": "sqrt(total_score)"}), None, "is not allowed"),
    (base_migration(rename={"best": "top_score"}), None, "'best' is not a value field of version 1"),
    (base_migration(rename={}), None, "'best_score' is neither in ps_test.v2 nor dropped"),
    (base_migration(drop=["total_score"]), None, "leaderboard.default_by"),
    (base_migration(defaults={"avg_score": 0}), None, "name no aggregation this migration adds"),
    (base_migration(version=3), None, "the first migration produces version 3"),
    (base_migration(), [{"name": "games", "type": "long"}, {"name": "total_score", "type": "long"},
                        {"name": "top_score", "type": "long"}, {"name": "last_played", "type": "double"},
                        {"name": "avg_score", "type": "long"}, {"name": "extra", "type": "long"}],
     "value fields ['extra'] of ps_test.v2 have no source"),
    (base_migration(derive={}), [{"name": "games", "type": "double"}, {"name": "total_score", "type": "long"},
                                 {"name": "top_score", "type": "long"}, {"name": "last_played", "type": "long"}],
     None),
])
def test_a_migration_that_cannot_be_expressed_is_refused(tmp_path, migration, v2_fields, message):
    path = store_file(tmp_path, migration, v2_fields)
    if message is None:  # a widening alone is fine
        assert load(path).value_field("games").type == "double"
        return
    with pytest.raises(StoreDefinitionError) as caught:
        load(path)
    assert message in str(caught.value) and "player_stats" in str(caught.value)


def test_narrowing_is_refused(tmp_path):
    first = store_file(tmp_path, base_migration(derive={}), [
        {"name": "games", "type": "long"}, {"name": "total_score", "type": "double"},
        {"name": "top_score", "type": "long"}, {"name": "last_played", "type": "long"}])
    raw = yaml.safe_load(first.read_text())
    (first.parents[1] / "values" / "ps_test.v3.json").write_text(json.dumps({"version": 3, "fields": [
        {"name": "games", "type": "long"}, {"name": "total_score", "type": "long"},
        {"name": "top_score", "type": "long"}, {"name": "last_played", "type": "long"}]}))
    raw["migrations"].append({"version": 3, "value_schema": "ps_test.v3"})
    first.write_text(yaml.safe_dump(raw))
    with pytest.raises(StoreDefinitionError, match="changes type double -> long; only long -> double widens"):
        load(first, 3)


def test_window_and_session_stores_declare_value_migrations():
    trades = parse_store(SCHEMAS, "trade_stats", SCHEMAS / "stores" / "trade_stats.yaml", 2)
    assert trades.storage == "trade_stats.v2" and trades.window is not None
    assert trades.value_columns == ("trades", "min_price", "max_price", "avg_price", "volume", "last_price",
                                    "price_range")
    assert [d.target for d in trades.derived] == ["price_range"]
    sessions = parse_store(SCHEMAS, "user_sessions", SCHEMAS / "stores" / "user_sessions.yaml", 2)
    assert "clicks" in sessions.aggregated_columns and [d.target for d in sessions.derived] == ["duration_ms"]


@pytest.mark.parametrize("change", [{"window": {"size": "10s", "advance": "1s"}}, {"session": {"gap": "1h"}},
                                    {"key_field": "venue"}])
def test_a_window_or_session_shape_change_is_refused(tmp_path, change):
    raw = yaml.safe_load((SCHEMAS / "stores" / "trade_stats.yaml").read_text())
    raw["migrations"] = [{"version": 2, "value_schema": "trade_stats.v1", **change}]
    path = tmp_path / "trade_stats.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(StoreDefinitionError, match=f"cannot change '{next(iter(change))}'.*declare a new store"):
        parse_store(SCHEMAS, "trade_stats", path)


def test_a_row_of_version_two_in_version_one_shape(tmp_path):
    v2 = load(store_file(tmp_path))
    row = {"key": "p1", "games": 4, "total_score": 10.0, "top_score": 7, "last_played": 5, "avg_score": 2.5,
           "source_partition": 1}
    assert down_convert(v2, row, 1) == {"key": "p1", "games": 4, "total_score": 10, "best_score": 7,
                                        "last_played": 5, "source_partition": 1}
    assert list(down_convert(v2, copy.deepcopy(row), 1)) == ["key", "games", "total_score", "best_score",
                                                             "last_played", "source_partition"]
    inexact = down_convert(v2, {**row, "total_score": 10.5}, 1)
    assert inexact["total_score"] == 10.5  # not exact as a long: served as it is
    assert down_convert(v2, row, 2) == row
    v1 = load(store_file(tmp_path), None)
    with pytest.raises(ValueError, match=r"serves value schema versions \[1\]"):
        check_servable(v1, 2)


def test_a_dropped_field_is_gone_from_the_version_and_its_rows(tmp_path):
    v2 = load(store_file(tmp_path, base_migration(drop=["last_played"]), [
        {"name": "games", "type": "long"}, {"name": "total_score", "type": "double"},
        {"name": "top_score", "type": "long"}, {"name": "avg_score", "type": "double"}]))
    assert "last_played" not in v2.value_columns and "last_played" not in v2.aggregated_columns
    assert v2.history[0].dropped == ("last_played",)
    assert down_convert(v2, {"key": "p", "games": 2, "total_score": 4.0, "top_score": 3, "avg_score": 2.0}, 1) == {
        "key": "p", "games": 2, "total_score": 4, "best_score": 3}
