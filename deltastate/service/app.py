"""The interactive-query service: `create_app(settings, options)` builds the FastAPI app.

Two pure ASGI middlewares run before routing, outermost first: ServiceMiddleware does what every
request needs, the bearer token (auth.py) and latency and error metrics per route template
(metrics.py); FastPath (fastpath.py, unless options.fast_path is off) answers point reads without
FastAPI's routing. When the instance is one of a query tier (options.tier), TierRouter
(tier/router.py) sits between the two: it forwards or scatters a read to the instances that own
its partitions. deltastate's errors become typed JSON answers (answers.py); FastAPI's parameter
validation errors become 400s that name the parameter, like every other bad parameter here.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from deltastate.config import Settings
from deltastate.errors import DeltastateError
from deltastate.service.answers import JSONAnswer, error_answer, parameter_error
from deltastate.service.auth import authorized
from deltastate.service.fastpath import FastPath
from deltastate.service.options import ServiceOptions
from deltastate.service.routes import router
from deltastate.service.state import ServiceState
from deltastate.service.tier.membership import Membership
from deltastate.service.tier.router import TierRouter
from deltastate.stores import list_stores

API_DESCRIPTION = """Kafka Streams interactive queries over deltastate's versioned DuckDB snapshots.
Every answer carries the snapshot version, its publish time and its staleness, in the body (`meta`)
and in X-Deltastate-* headers. Times are epoch milliseconds or ISO-8601 (UTC when no zone)."""


class ServiceMiddleware:
    """Auth first, then time the request and count it under its route template."""

    def __init__(self, app: ASGIApp, state: ServiceState) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500
        token = self.state.options.api_token
        if token is not None and not authorized(token, scope["path"], _authorization(scope)):
            answer = JSONAnswer({"error": {"type": "unauthorized", "message": "a valid bearer token is required"}},
                                status_code=401, headers={"WWW-Authenticate": 'Bearer realm="deltastate"'})
            await answer(scope, receive, send)
            self._observe(scope, 401, started, "unauthorized")
            return

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            self._observe(scope, status, started, (scope.get("state") or {}).get("error_type"))

    def _observe(self, scope: Scope, status: int, started: float, error: str | None) -> None:
        route = scope.get("route")
        endpoint = getattr(route, "path", None) or "unmatched"
        self.state.metrics.observe(endpoint, scope.get("method", ""), status, time.perf_counter() - started, error)


def _authorization(scope: Scope) -> str | None:
    """The Authorization header (the last one, as a dict of the headers would keep), or None."""
    found = None
    for name, value in scope.get("headers") or ():
        if name == b"authorization":
            found = value
    return (found.decode("latin-1") or None) if found is not None else None


def _source_topics(state: ServiceState) -> list[str]:
    """The topics the stores' streams read: the partitions the tier shares out."""
    from deltastate.query.location import stream_topic

    topics = []
    for name in list_stores(state.settings):
        try:
            topics.append(stream_topic(state.settings, state.queries.store(name)).topic)
        except DeltastateError:
            continue  # a store whose definition fails is refused when it is read
    return topics


def create_app(settings: Settings, options: ServiceOptions | None = None) -> FastAPI:
    state = ServiceState(settings, options or ServiceOptions())
    if state.options.tier is not None:
        state.tier = Membership(settings.kafka_bootstrap, state.options.tier, lambda: _source_topics(state))

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        import anyio.to_thread

        # Sync endpoints run on AnyIO's worker threads; bound them (see ServiceOptions.worker_threads).
        anyio.to_thread.current_default_thread_limiter().total_tokens = state.options.worker_threads
        state.start()
        yield
        state.close()

    app = FastAPI(title="deltastate interactive queries", version="1", description=API_DESCRIPTION,
                  lifespan=lifespan)
    app.state.service = state
    app.include_router(router)

    @app.get("/metrics", tags=["service"], response_class=Response)
    def metrics() -> Response:
        """Prometheus metrics: latency per endpoint, errors, snapshot swaps, version and age."""
        body, content_type = state.metrics.render()
        return Response(body, media_type=content_type)

    @app.exception_handler(DeltastateError)
    async def deltastate_error(request: Request, exc: DeltastateError) -> Response:
        answer, kind = error_answer(exc)
        request.state.error_type = kind
        return answer

    @app.exception_handler(RequestValidationError)
    async def bad_request(request: Request, exc: RequestValidationError) -> Response:
        first: dict[str, Any] = (exc.errors() or [{}])[0]
        location = [str(part) for part in first.get("loc", ())]
        if location and location[0] in ("query", "path", "body", "header"):
            location = location[1:]  # where it came from; the rest names the parameter
        name = ".".join(location) or "body"
        answer, kind = parameter_error(name, str(first.get("msg", "invalid value")))
        request.state.error_type = kind
        return answer

    # add_middleware puts the last one added outermost: auth and metrics see both paths alike.
    if state.options.fast_path:
        app.add_middleware(FastPath, api=app, state=state)
    if state.tier is not None:
        app.add_middleware(TierRouter, api=app, state=state)
    app.add_middleware(ServiceMiddleware, state=state)
    return app


__all__ = ["create_app"]
