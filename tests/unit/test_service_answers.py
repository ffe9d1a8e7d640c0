"""Pure pieces of the REST service: bearer-token checks, paging cursors, JSON values, and the
HTTP status each deltastate error maps to."""

import json
import math
from datetime import UTC, datetime
from decimal import Decimal

import pytest

from deltastate.errors import DeltastateError, KeyNotFoundError, QueryError, SnapshotError, UnknownStoreError
from deltastate.query.errors import ParameterError, SnapshotNotRetainedError, SqlLimitError, StaleSnapshotError, StoreTypeError
from deltastate.service.answers import JSONAnswer, decode_cursor, encode_cursor, error_answer, json_key, jsonable
from deltastate.service.auth import authorized


def test_bearer_token() -> None:
    assert authorized(None, "/stores", None)
    assert authorized("t0k", "/health", None) and authorized("t0k", "/openapi.json", None)
    assert authorized("t0k", "/stores", "Bearer t0k") and authorized("t0k", "/stores", "bearer t0k")
    for header in (None, "", "Bearer", "Bearer t0", "Bearer t0k2", "Basic t0k", "t0k"):
        assert not authorized("t0k", "/stores", header), header


@pytest.mark.parametrize("key", [["player-1"], ["a/b ü", 1_767_225_600_000, 1_767_225_605_000], [""]])
def test_cursor_round_trip(key: list) -> None:
    token = encode_cursor(key)
    assert "=" not in token and decode_cursor(token) == key


@pytest.mark.parametrize("bad", ["!!", "bm90IGpzb24", encode_cursor([]), encode_cursor([1]), encode_cursor(["k", "x"]),
                                 encode_cursor(["k", True])])
def test_bad_cursors_name_the_parameter(bad: str) -> None:
    with pytest.raises(ParameterError) as caught:
        decode_cursor(bad)
    assert caught.value.parameter == "cursor"


def test_json_values() -> None:
    assert jsonable({"t": datetime(2026, 1, 2, 3, 4, 5, 6000), "d": Decimal("1.5"), "b": b"\x01\xff",
                     "n": float("nan"), "i": -math.inf, "l": (1, None)}) == {
        "t": "2026-01-02T03:04:05.006000Z", "d": 1.5, "b": "01ff", "n": "nan", "i": "-inf", "l": [1, None]}


@pytest.mark.parametrize(("exc", "status", "kind"), [
    (KeyNotFoundError("s", "k"), 404, "key_not_found"),
    (UnknownStoreError("s", ["a"]), 404, "unknown_store"),
    (SnapshotNotRetainedError("v 9"), 404, "snapshot_not_retained"),
    (StaleSnapshotError("s", 3.5, 1.0, 7), 503, "stale"),
    (SnapshotError("none yet"), 503, "no_snapshot"),
    (ParameterError("n", "bad"), 400, "bad_parameter"),
    (StoreTypeError("s", "window", "top", "use windows"), 400, "wrong_store_type"),
    (SqlLimitError("rows"), 400, "sql_limit"),
    (QueryError("read-only: DROP"), 400, "query_refused"),
    (DeltastateError("boom"), 500, "internal"),
])
def test_error_statuses(exc: DeltastateError, status: int, kind: str) -> None:
    answer, got = error_answer(exc)
    assert (answer.status_code, got) == (status, kind)
    if isinstance(exc, StaleSnapshotError):
        assert answer.headers["Retry-After"] == "1" and b'"max_staleness":1.0' in answer.body


ODD_VALUES = [
    {"rows": [{"key": "a", "n": 1, "x": 1.5, "t": datetime(2026, 1, 1, 12, 0), "d": Decimal("2.5")}]},
    {"score": float("nan"), "inf": [float("inf"), -float("inf")]},
    {"map": {True: 1, None: 2, 1.5: 3, 7: 4}},  # keys JSON writes itself: true, null, 1.5, 7
    {"map": {(1, 2): "tuple key"}},  # a key JSON cannot write: the slow path, as text
    {"nested": ({"b": b"\x01\xff"}, Decimal("NaN"))},
    [datetime(2026, 1, 1, tzinfo=UTC), object.__new__(type("Odd", (), {"__str__": lambda self: "odd"}))],
]


@pytest.mark.parametrize("content", ODD_VALUES)
def test_an_answer_is_the_same_bytes_by_either_encoder(content) -> None:
    """JSONAnswer lets JSON's C encoder write plain values and asks jsonable() for the rest; converting
    every value first (the fallback) must write the same bytes."""
    converted = json.dumps(jsonable(content), separators=(",", ":"), allow_nan=False).encode()
    assert JSONAnswer(content).body == converted


def test_map_keys_as_json_writes_them() -> None:
    assert [json_key(k) for k in ("a", True, None, 1.5, 7, (1, 2))] == ["a", "true", "null", "1.5", "7", "(1, 2)"]
