"""The hot point get: GET /stores/{store}/keys/{key} at snapshot consistency from the read index,
with what an answer shares with every other answer of the same snapshot and freshness (the meta
object, the X-Deltastate-* headers) rendered once.

It takes the steps of ServiceState.reading() and routes.get_key() in their order (lease, the
snapshot's own store definition, freshness, max_staleness, the lookup, the answer's shape), so its
answers are those bytes; a case it does not cover returns None before anything is checked, and the
caller runs the endpoint instead: a store the snapshot does not hold or without a read index (the
endpoint names the reason), a schema_version pin, no snapshot open yet.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.responses import Response

from deltastate.errors import KeyNotFoundError, SnapshotError
from deltastate.service.answers import jsonable
from deltastate.service.freshness import Freshness, check_max_staleness
from deltastate.service.state import ServiceState
from deltastate.stores.backends import backend_of

# Values JSON writes as they are (jsonable returns them unchanged): no per-value conversion call.
_PLAIN = frozenset({str, int, bool, type(None)})
_PARTS_HELD = 64  # (freshness, schema version) renderings kept; a few are live at any time


def _json(value: Any) -> bytes:
    """JSONAnswer's encoding of an already JSON-safe value."""
    return json.dumps(value, separators=(",", ":"), allow_nan=False).encode()


def _safe_row(row: dict[str, Any]) -> dict[str, Any]:
    """jsonable(row), converting only the values that need it."""
    return {k if type(k) is str else str(k): v if type(v) in _PLAIN else jsonable(v) for k, v in row.items()}


class RawAnswer(Response):
    """A 200 JSON answer whose body and headers are already bytes."""

    def __init__(self, body: bytes, raw_headers: list[tuple[bytes, bytes]]) -> None:
        self.status_code = 200
        self.background = None
        self.body = body
        # Starlette's order: the answer's own headers, then content-length, then content-type.
        self.raw_headers = [*raw_headers, (b"content-length", str(len(body)).encode("latin-1")),
                            (b"content-type", b"application/json")]


class PointGet:
    """Answers plain point gets for one app; thread-safe (the renderings cache is replaced whole)."""

    def __init__(self, state: ServiceState) -> None:
        self.state = state
        self._parts: dict[tuple[Freshness, int], tuple[bytes, list[tuple[bytes, bytes]]]] = {}

    def _rendered(self, freshness: Freshness, schema_version: int) -> tuple[bytes, list[tuple[bytes, bytes]]]:
        """The tail of the body from `,"meta":` on, and the freshness headers, as routes._answer writes them."""
        found = self._parts.get((freshness, schema_version))
        if found is None:
            meta = freshness.body()
            meta["schema_version"] = schema_version
            headers = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in freshness.headers().items()]
            found = (b',"meta":' + _json(jsonable(meta)) + b"}", headers)
            parts = self._parts if len(self._parts) < _PARTS_HELD else {}
            parts[(freshness, schema_version)] = found
            self._parts = parts
        return found

    def answer(self, store: str, key: str, max_staleness: float | None,
               partitions: frozenset[int] | None = None) -> Response | None:
        """The answer to GET /stores/{store}/keys/{key}[?max_staleness=...] at snapshot consistency;
        None when the endpoint must answer (see the module's docstring). Raises the DeltastateError
        the endpoint would raise (stale, key not found). partitions: the source partitions to look
        in (a query tier's instance names the key's; None: all)."""
        state = self.state
        if state.pool.current_version() is None:
            return None  # the first read opens the snapshot: the endpoint does that off the event loop
        try:
            lease = state.pool.lease()
            snap = lease.__enter__()
        except SnapshotError:
            return None
        try:
            if store not in snap.store_info:
                return None
            definition = state.queries.at(snap).store(store)
            index = snap.index(store) if backend_of(definition).read_index else None
            if index is None or (partitions is not None and not index.partitioned):
                return None
            freshness = state.freshness.of(snap, [store], None)
            check_max_staleness(freshness, max_staleness, store)
            found = index.find_many([key], partitions)[0]
            if found is None:
                raise KeyNotFoundError(store, key)
            value = _json(_safe_row(index.row(found)))
            tail, headers = self._rendered(freshness, definition.value_version)
            body = b'{"store":' + _json(store) + b',"key":' + _json(key) + b',"value":' + value + tail
            return RawAnswer(body, headers)
        finally:
            lease.__exit__(None, None, None)


__all__ = ["PointGet", "RawAnswer"]
