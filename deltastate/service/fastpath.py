"""The fast path for point reads and the top: a pure ASGI layer inside the service's auth and metrics middleware
that answers GET /stores/{store}/keys/{key}, GET /stores/{store}/keys/{key}/rank, GET
/stores/{store}/top and POST /stores/{store}/keys:batchGet without FastAPI's routing, dependency
solving and thread hop.

It calls the very functions FastAPI would (the routes' option dependencies and endpoints, the app's
DeltastateError handler), so an answer is the same bytes either way; it only parses the request
itself. Anything it does not parse with certainty (a parameter value outside the plain forms below,
a repeated parameter, a body that is not a JSON object of string keys, HEAD, a root path, consistency
latest) goes to FastAPI untouched, which validates it and writes the error. The OpenAPI document is
FastAPI's and unchanged.

Reads of the published snapshot answer on the event loop: a read-index lookup takes tens of
microseconds, less than handing it to a worker thread costs. Reads that touch the changelog or
other snapshot files (committed consistency, as_of, large batches, the first read before any
snapshot is open) run on AnyIO's worker threads, as FastAPI runs them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any
from urllib.parse import parse_qsl

import anyio.to_thread
from fastapi import FastAPI
from fastapi.routing import APIRoute
from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from deltastate.errors import DeltastateError
from deltastate.service import routes
from deltastate.service.pointget import PointGet
from deltastate.service.state import ServiceState
from deltastate.service.tier.scope import partitions_asked

# Batches up to this many keys, and tops up to this many rows, answer on the event loop; a larger one
# would hold it for milliseconds.
INLINE_BATCH_KEYS = 64
INLINE_TOP_ROWS = 100
# The largest batchGet body read here; a larger one goes to FastAPI (it refuses more than 1,000 keys).
MAX_BODY_BYTES = 1 << 20

_POSITIVE_INT = re.compile(r"[1-9][0-9]{0,17}")
_DECIMAL = re.compile(r"(?:0|[1-9][0-9]{0,14})(?:\.[0-9]{1,15})?")
_BOOLEANS = {"true": True, "false": False, "1": True, "0": False}
_CONSISTENCIES = ("snapshot", "committed")
_DEFER = object()  # a value this layer leaves to FastAPI's validation


def _float(raw: str) -> object:
    return float(raw) if _DECIMAL.fullmatch(raw) else _DEFER


def _int(raw: str) -> object:
    return int(raw) if _POSITIVE_INT.fullmatch(raw) else _DEFER


def _top_n(raw: str) -> object:
    """A top's n within routes.top's bounds; any other value goes to FastAPI, which refuses it."""
    return int(raw) if _POSITIVE_INT.fullmatch(raw) and int(raw) <= routes.TOP_MAX else _DEFER


def _bool(raw: str) -> object:
    return _BOOLEANS.get(raw, _DEFER)


def _consistency(raw: str) -> object:
    return raw if raw in _CONSISTENCIES else _DEFER


def _text(raw: str) -> object:
    return raw if raw else _DEFER


# The query parameters of the point reads (routes.py) and the plain forms accepted here.
READ_PARAMETERS: dict[str, Callable[[str], object]] = {
    "max_staleness": _float, "fresh": _bool, "consistency": _consistency, "as_of_version": _int,
    "as_of": _text, "schema_version": _int}
RANK_PARAMETERS = {**READ_PARAMETERS, "by": _text}
TOP_PARAMETERS = {**RANK_PARAMETERS, "n": _top_n}


def parse_query(query_string: bytes, accepted: dict[str, Callable[[str], object]]) -> dict[str, Any] | None:
    """The accepted parameters of a query string as Python values, as FastAPI would pass them;
    None when any of them needs FastAPI's validation. Parameters of other names are ignored, as
    FastAPI ignores them."""
    if not query_string:
        return {}
    # The same decoding Starlette's QueryParams applies.
    pairs = parse_qsl(query_string.decode("latin-1"), keep_blank_values=True)
    out: dict[str, Any] = {}
    for name, raw in pairs:
        parse = accepted.get(name)
        if parse is None:
            continue
        value = parse(raw)
        if value is _DEFER or name in out:
            return None
        out[name] = value
    return out


@dataclass(frozen=True)
class _Route:
    """One endpoint this layer answers, with the routes FastAPI would try before it."""

    route: APIRoute
    method: str
    earlier: tuple[re.Pattern[str], ...]


def _find(app: FastAPI, path: str, method: str) -> _Route:
    earlier = []
    for candidate in app.router.routes:
        methods = getattr(candidate, "methods", None) or ()
        if isinstance(candidate, APIRoute) and candidate.path == path and method in methods:
            return _Route(candidate, method, tuple(earlier))
        regex = getattr(candidate, "path_regex", None)
        if regex is not None and (method in methods or not hasattr(candidate, "methods")):
            earlier.append(regex)  # a route without methods (a mount) matches any method
    raise LookupError(f"the app declares no {method} {path}")


class FastPath:
    """Pure ASGI middleware: answers the point reads above, passes every other request on."""

    def __init__(self, app: ASGIApp, api: FastAPI, state: ServiceState) -> None:
        self.app = app
        self.api = api
        self.state = state
        self.get = _find(api, "/stores/{store}/keys/{key}", "GET")
        self.rank = _find(api, "/stores/{store}/keys/{key}/rank", "GET")
        self.top = _find(api, "/stores/{store}/top", "GET")
        self.batch = _find(api, "/stores/{store}/keys:batchGet", "POST")
        self.point_get = PointGet(state)
        # Requests answered here and requests handed to FastAPI (the tests read them from app.state).
        self.answered = 0
        self.passed = 0
        api.state.fast_path = self

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("root_path"):
            await self.app(scope, receive, send)
            return
        method, path = scope["method"], scope["path"]
        if method == "GET":
            for target, accepted in ((self.get, READ_PARAMETERS), (self.rank, RANK_PARAMETERS),
                                     (self.top, TOP_PARAMETERS)):
                found = self._match(target, path)
                if found is not None:
                    params = parse_query(scope["query_string"], accepted)
                    if params is None:
                        break
                    await self._answer(scope, receive, send, target, found, params, None)
                    return
        elif method == "POST":
            found = self._match(self.batch, path)
            if found is not None:
                await self._batch(scope, receive, send, found)
                return
        self.passed += 1
        await self.app(scope, receive, send)

    def _handler(self, exc: DeltastateError) -> Callable[[Request, Exception], Any]:
        """The app's handler for exc, found as Starlette finds it: the nearest class in its MRO."""
        handlers = self.api.exception_handlers
        return next(handlers[cls] for cls in type(exc).__mro__ if cls in handlers)

    @staticmethod
    def _match(target: _Route, path: str) -> dict[str, str] | None:
        matched = target.route.path_regex.match(path)
        if matched is None or any(p.match(path) for p in target.earlier):
            return None
        return matched.groupdict()

    async def _batch(self, scope: Scope, receive: Receive, send: Send, found: dict[str, str]) -> None:
        """Read the body; a body FastAPI must judge goes to it, replayed."""
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client went away: let FastAPI see it
                self.passed += 1
                await self.app(scope, _replay(b"".join(chunks), receive, message), send)
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            more = message.get("more_body", False)
            if size > MAX_BODY_BYTES and more:
                self.passed += 1
                await self.app(scope, _replay(b"".join(chunks), receive, None, more=True), send)
                return
        body = b"".join(chunks)
        params = parse_query(scope["query_string"], READ_PARAMETERS)
        request_body = _batch_body(scope, body) if params is not None else None
        if params is None or request_body is None:
            self.passed += 1
            await self.app(scope, _replay(body, receive, None), send)
            return
        await self._answer(scope, receive, send, self.batch, found, params, request_body)

    async def _answer(self, scope: Scope, receive: Receive, send: Send, target: _Route, found: dict[str, str],
                      params: dict[str, Any], body: routes.BatchGetRequest | None) -> None:
        self.answered += 1
        scope["route"] = target.route  # the metrics label the request by its route template, as FastAPI does
        request = Request(scope, receive)
        snapshot_read = (params.get("consistency") in (None, "snapshot") and not params.get("fresh")
                         and "as_of" not in params and "as_of_version" not in params)
        try:
            response = None
            if target is self.get and snapshot_read and "schema_version" not in params:
                response = self.point_get.answer(found["store"], found["key"], params.get("max_staleness"),
                                                 partitions_asked(request))
            if response is None:
                call = partial(self._endpoint, request, target, found, params, body)
                small = (len(body.keys) <= INLINE_BATCH_KEYS if body is not None
                         else params.get("n", 10) <= INLINE_TOP_ROWS if target is self.top else True)
                inline = snapshot_read and small and self.state.pool.current_version() is not None
                response = call() if inline else await anyio.to_thread.run_sync(call)
        except DeltastateError as exc:
            response = await self._handler(exc)(request, exc)
        await response(scope, receive, send)

    def _endpoint(self, request: Request, target: _Route, found: dict[str, str], params: dict[str, Any],
                  body: routes.BatchGetRequest | None) -> Response:
        """The route's own dependency and endpoint functions, called as FastAPI calls them."""
        if target is self.rank or target is self.top:
            options = routes.read_options(**{k: v for k, v in params.items() if k not in ("by", "n")})
            if target is self.top:
                return routes.top(request, found["store"], options, n=params.get("n", 10), by=params.get("by"))
            return routes.rank(request, found["store"], found["key"], options, by=params.get("by"))
        options = routes.point_read_options(**params)
        if body is not None:
            return routes.batch_get(request, found["store"], body, options)
        return routes.get_key(request, found["store"], found["key"], options)


def _batch_body(scope: Scope, body: bytes) -> routes.BatchGetRequest | None:
    """The batchGet body as FastAPI would validate it, when it is plain JSON; None otherwise."""
    content_type = None
    for name, value in scope["headers"]:
        if name == b"content-type":
            if content_type is not None:
                return None
            content_type = value
    if content_type != b"application/json":
        return None
    try:
        return routes.BatchGetRequest.model_validate(json.loads(body))
    except (ValueError, ValidationError):
        return None


def _replay(body: bytes, receive: Receive, pending: Message | None, more: bool = False) -> Receive:
    """A receive that hands out the body already read, then goes on with the client's receive."""
    queued: list[Message] = [{"type": "http.request", "body": body, "more_body": more}]
    if pending is not None:
        queued.append(pending)

    async def replayed() -> Message:
        if queued:
            return queued.pop(0)
        return await receive()

    return replayed


__all__ = ["FastPath", "parse_query"]
