"""How the service writes answers: JSON-safe values, paging cursors, and errors as typed JSON.

Every error body is {"error": {"type", "message", ...}} with the store, key or parameter it is
about; the HTTP status follows the exception's class, never its message:
  400 bad parameter, wrong store type, refused or limited SQL      404 unknown store, key, version
  401 missing/wrong token (auth.py)     503 stale beyond max_staleness, no snapshot yet, no instance
                                        of the query tier answers for the partitions read
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

from starlette.responses import Response

from deltastate.errors import DeltastateError, KeyNotFoundError, QueryError, SnapshotError, UnknownStoreError
from deltastate.query.errors import (
    FreshReadError,
    ParameterError,
    SnapshotNotRetainedError,
    SqlLimitError,
    StaleSnapshotError,
    StoreTypeError,
)
from deltastate.service.tier.forward import InstanceUnavailableError

# Most specific first.
STATUS: tuple[tuple[type[DeltastateError], int, str], ...] = (
    (KeyNotFoundError, 404, "key_not_found"),
    (UnknownStoreError, 404, "unknown_store"),
    (SnapshotNotRetainedError, 404, "snapshot_not_retained"),
    (StaleSnapshotError, 503, "stale"),
    (FreshReadError, 503, "fresh_unavailable"),
    (SnapshotError, 503, "no_snapshot"),
    (InstanceUnavailableError, 503, "instance_unavailable"),
    (ParameterError, 400, "bad_parameter"),
    (StoreTypeError, 400, "wrong_store_type"),
    (SqlLimitError, 400, "sql_limit"),
    (QueryError, 400, "query_refused"),
    (DeltastateError, 500, "internal"),
)


class JSONAnswer(Response):
    """JSON with deltastate's value rules (jsonable) and no NaN tokens, which JSON does not allow."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        # JSON's C encoder writes the plain values itself and asks jsonable() for the others; a
        # non-finite float (ValueError) or a key JSON cannot write (TypeError) takes the slow path,
        # which converts every value first. Both write the same bytes for the same content.
        try:
            return json.dumps(content, default=jsonable, separators=(",", ":"), allow_nan=False,
                              check_circular=False).encode()
        except (ValueError, TypeError):
            return json.dumps(jsonable(content), separators=(",", ":"), allow_nan=False).encode()


def json_key(key: Any) -> str:
    """A mapping key as JSON's encoder writes it (true, null, 1.5), other keys as their text."""
    if isinstance(key, str):
        return key
    if key is None or isinstance(key, bool | int | float):
        return json.dumps(key)
    return str(key)


def jsonable(value: Any) -> Any:
    """Snapshot values as JSON: naive times are UTC (written with Z), non-finite floats as strings."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, dict):
        return {json_key(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, datetime):
        return value.isoformat() + ("Z" if value.tzinfo is None else "")
    if isinstance(value, date | time):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, Decimal):
        return jsonable(float(value))
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    return str(value)


def error_answer(exc: DeltastateError, headers: dict[str, str] | None = None) -> tuple[JSONAnswer, str]:
    """The JSON error answer for exc, and its type label (for metrics)."""
    status, kind = next((s, k) for cls, s, k in STATUS if isinstance(exc, cls))
    error: dict[str, Any] = {"type": kind, "message": str(exc)}
    for attribute in ("parameter", "store", "key"):
        if getattr(exc, attribute, None) is not None:
            error[attribute] = getattr(exc, attribute)
    extra = dict(headers or {})
    if isinstance(exc, StaleSnapshotError):
        error["staleness_seconds"] = exc.staleness if math.isfinite(exc.staleness) else None
        error["max_staleness"] = exc.max_staleness
        extra["Retry-After"] = "1"
    return JSONAnswer({"error": error}, status_code=status, headers=extra), kind


def parameter_error(parameter: str, message: str) -> tuple[JSONAnswer, str]:
    return error_answer(ParameterError(parameter, message))


# -- paging ----------------------------------------------------------------------------------------
def encode_cursor(store_key: list[Any]) -> str:
    """An opaque cursor for the page after this store key (key, or key + window bounds)."""
    return base64.urlsafe_b64encode(json.dumps(store_key, separators=(",", ":")).encode()).decode().rstrip("=")


def decode_cursor(cursor: str | None) -> list[Any] | None:
    if cursor is None:
        return None
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        value = json.loads(raw)
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise ParameterError("cursor", "not a cursor this service issued") from None
    if not isinstance(value, list) or not value or not isinstance(value[0], str) or \
            not all(isinstance(v, int) and not isinstance(v, bool) for v in value[1:]):
        raise ParameterError("cursor", "not a cursor this service issued")
    return value


__all__ = ["JSONAnswer", "STATUS", "decode_cursor", "encode_cursor", "error_answer", "jsonable", "parameter_error"]
