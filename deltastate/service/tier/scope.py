"""The headers instances of a tier speak to each other, and the scope of a request they carry.

A request from another instance is marked forwarded (the sender's URL): it is answered where it
lands, never forwarded again, so a read takes one hop at most whatever the views say. A scattered
part also names the source partitions it covers; the instance answers for their rows only. A rank
part for partitions that do not hold the key carries the key's value instead: the answer is how many
of their keys rank above it.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request

from deltastate.query.errors import ParameterError

FORWARDED = "x-deltastate-forwarded"
PARTITIONS = "x-deltastate-partitions"
RANK_VALUE = "x-deltastate-rank-value"
# On answers in a tier: who answered, as what, and for which partitions a standby stood in.
SERVED_BY = "X-Deltastate-Served-By"
SERVED_AS = "X-Deltastate-Served-As"
STANDBY_FOR = "X-Deltastate-Standby-For"


def forwarded(request: Request) -> bool:
    return FORWARDED in request.headers


def partitions_asked(request: Request) -> frozenset[int] | None:
    """The partitions a forwarded part covers; None for a whole read."""
    raw = request.headers.get(PARTITIONS) if forwarded(request) else None
    if raw is None:
        return None
    try:
        return frozenset(int(p) for p in raw.split(",") if p.strip())
    except ValueError:
        raise ParameterError(PARTITIONS, f"not a comma-separated list of partitions: {raw!r}") from None


def rank_value_asked(request: Request) -> tuple[bool, Any]:
    """(True, value) when a forwarded rank part asks for the count of keys above that value."""
    raw = request.headers.get(RANK_VALUE) if forwarded(request) else None
    if raw is None:
        return False, None
    try:
        value = json.loads(raw)
    except ValueError:
        raise ParameterError(RANK_VALUE, f"not a JSON value: {raw!r}") from None
    if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
        raise ParameterError(RANK_VALUE, f"not a number or null: {raw!r}")
    return True, value


def partitions_header(partitions: list[int]) -> str:
    return ",".join(str(p) for p in sorted(partitions))


def served_headers(by: list[str], standby_for: list[str]) -> list[tuple[bytes, bytes]]:
    """The raw answer headers naming who answered, and for whom a standby stood in."""
    out = [(SERVED_BY.lower().encode(), ",".join(by).encode("latin-1")),
           (SERVED_AS.lower().encode(), b"standby" if standby_for else b"active")]
    if standby_for:
        out.append((STANDBY_FOR.lower().encode(), ",".join(standby_for).encode("latin-1")))
    return out


def batch_keys(body: bytes, most: int) -> list[str] | None:
    """The keys of a plain batchGet body of at most `most` keys; None for anything the endpoint
    must judge (and refuse)."""
    try:
        parsed = json.loads(body)
    except ValueError:
        return None
    keys = parsed.get("keys") if isinstance(parsed, dict) else None
    if not isinstance(keys, list) or not 1 <= len(keys) <= most or not all(isinstance(k, str) for k in keys):
        return None
    return keys


__all__ = ["FORWARDED", "PARTITIONS", "RANK_VALUE", "SERVED_AS", "SERVED_BY", "STANDBY_FOR", "batch_keys",
           "forwarded", "partitions_asked", "partitions_header", "rank_value_asked", "served_headers"]
