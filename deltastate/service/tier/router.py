"""The query tier's ASGI layer: per request, answer here, forward to the key's owner, or scatter to
the owners of every partition and merge. It runs inside auth and metrics and before the fast path,
so a request is authorised and counted once where it arrives, and again where it is forwarded to.

  get, windows and sessions of one key   -> the key's owner (one hop), its standby if the owner is down
  batchGet                               -> the keys split by owner, one request per owner, merged
  range, all, top                        -> every owner for its partitions, merged (merge.py)
  rank                                   -> the key's owner for its rank among its partitions, every
                                            other owner for its count of keys above that value
  anything else (stores, SQL, windows of all keys, metadata, health) -> answered here
A request another instance forwarded is answered here, whatever this instance's view says.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl

from fastapi import FastAPI
from fastapi.routing import APIRoute
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from deltastate.changelog.layout import store_key_columns
from deltastate.errors import DeltastateError
from deltastate.ingest.partitioner import partition_for
from deltastate.query.location import StreamTopic, stream_topic
from deltastate.service.answers import JSONAnswer, encode_cursor, error_answer
from deltastate.service.routes import BATCH_GET_MAX
from deltastate.service.state import ServiceState
from deltastate.service.tier import merge
from deltastate.service.tier.forward import Ask, Forwarder, Part
from deltastate.service.tier.ownership import plan
from deltastate.service.tier.scope import FORWARDED, PARTITIONS, RANK_VALUE, batch_keys, partitions_header, served_headers

_KEY_READ = re.compile(r"^/stores/([^/]+)/keys/([^/]+)(?:/(windows|sessions))?$")
_RANK = re.compile(r"^/stores/([^/]+)/keys/([^/]+)/rank$")
_BATCH = re.compile(r"^/stores/([^/]+)/keys:batchGet$")
_SCATTER = re.compile(r"^/stores/([^/]+)/(range|all|top)$")
_TOPIC_CACHE_S = 1.0  # a store's stream topic is read from its checkpoint; a rerun may change it
# Answer headers a forwarded answer keeps (the rest belong to the hop).
_KEPT = ("content-type", "retry-after", "www-authenticate")


class TierRouter:
    def __init__(self, app: ASGIApp, api: FastAPI, state: ServiceState) -> None:
        self.app = app
        self.api = api
        self.state = state
        tier = state.tier
        assert tier is not None, "the router runs only in a tier"
        self.tier = tier
        self.here = tier.here
        self.forwarder = Forwarder(tier.here, tier.options.forward_timeout_s, tier.options.session_timeout_s)
        self._topics: dict[str, tuple[float, StreamTopic]] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(scope, receive, send)
            return
        if scope["type"] != "http" or any(name == FORWARDED.encode() for name, _ in scope["headers"]):
            await self.app(scope, receive, send)
            return
        method, path = scope["method"], scope["path"]
        # Answers built here are counted under their route template, as the endpoints' are.
        route = next((r for r in self.api.router.routes if isinstance(r, APIRoute) and method in r.methods
                      and r.path_regex.match(path)), None)
        if route is not None:
            scope["route"] = route
        try:
            if method == "GET" and (found := _KEY_READ.match(path)):
                await self._key_read(scope, receive, send, found[1], found[2])
            elif method == "GET" and (found := _RANK.match(path)):
                await self._rank(scope, receive, send, found[1], found[2])
            elif method == "GET" and (found := _SCATTER.match(path)):
                await self._scatter(scope, receive, send, found[1], found[2])
            elif method == "POST" and (found := _BATCH.match(path)):
                await self._batch(scope, receive, send, found[1])
            else:
                await self.app(scope, receive, send)
        except DeltastateError as exc:  # no instance answered
            answer, kind = error_answer(exc)
            scope.setdefault("state", {})["error_type"] = kind
            await answer(scope, receive, send)

    async def _lifespan(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def sending(message: Message) -> None:
            if message["type"] == "lifespan.shutdown.complete":
                await self.forwarder.close()
            await send(message)

        await self.app(scope, receive, sending)

    # -- where -------------------------------------------------------------------------------------
    def _topic(self, store: str) -> StreamTopic | None:
        """The topic and partition count the store runs on; None for a store this instance cannot
        resolve (unknown, or its definition fails): it answers here and says why."""
        now = time.monotonic()
        cached = self._topics.get(store)
        if cached is not None and cached[0] > now:
            return cached[1]
        try:
            found = stream_topic(self.state.settings, self.state.queries.store(store))
        except DeltastateError:
            return None
        self._topics[store] = (now + _TOPIC_CACHE_S, found)
        return found

    def _candidates(self, topic: str, partition: int) -> list[str]:
        view = self.tier.view
        owner = view.owner(topic, partition)
        return [self.here] if owner is None else [owner, *view.standbys(topic, partition)]

    # -- answers -------------------------------------------------------------------------------------
    async def _local(self, scope: Scope, receive: Receive, send: Send, standby_for: str | None = None,
                     partitions: list[int] | None = None) -> None:
        """Answer here, naming this instance on the answer; partitions: the ones the read covers, so
        that the read index is searched (and kept resident) in those only."""
        extra = served_headers([self.here], [standby_for] if standby_for else [])
        if partitions is not None:
            scope = {**scope, "headers": [*scope["headers"], (FORWARDED.encode(), self.here.encode("latin-1")),
                                          (PARTITIONS.encode(), partitions_header(partitions).encode())]}

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        await self.app(scope, receive, sending)

    async def _relay(self, scope: Scope, receive: Receive, send: Send, part: Part, owner: str) -> None:
        headers = {k: v for k, v in part.headers.items() if k.lower().startswith("x-deltastate-") or k.lower() in _KEPT}
        answer = Response(part.body, status_code=part.status, headers=headers)
        answer.raw_headers += served_headers([part.served_by], [owner] if part.standby else [])
        await answer(scope, receive, send)

    def _ask(self, scope: Scope, body: bytes = b"", **extra: str) -> Ask:
        return Ask(scope["method"], scope.get("raw_path") or scope["path"].encode(), scope["query_string"],
                   scope["headers"], body, tuple(extra.items()))

    async def _key_read(self, scope: Scope, receive: Receive, send: Send, store: str, key: str) -> None:
        topic = self._topic(store)
        if topic is None:
            await self.app(scope, receive, send)
            return
        partition = partition_for(key, topic.partitions)
        candidates = self._candidates(topic.topic, partition)
        ask = self._ask(scope, **{PARTITIONS: str(partition)})
        await self._one_hop(scope, receive, send, store, partition, candidates, ask)

    async def _one_hop(self, scope: Scope, receive: Receive, send: Send, store: str, partition: int,
                       candidates: list[str], ask: Ask) -> None:
        if candidates[0] == self.here:
            await self._local(scope, receive, send, partitions=[partition])
            return
        # Try the others first: answering here as a standby is the last resort, as it is for them.
        others = [c for c in candidates if c != self.here]
        try:
            part = await self.forwarder.ask(store, [partition], others, ask)
        except DeltastateError:
            if self.here not in candidates:
                raise
            await self._local(scope, receive, send, standby_for=candidates[0], partitions=[partition])
            return
        await self._relay(scope, receive, send, part, candidates[0])

    async def _parts(self, store: str, topic: StreamTopic, scope: Scope, body: bytes = b"",
                     groups: dict[str, list[int]] | None = None, **extra: str) -> list[Part]:
        """Every owner's part of a scattered read, asked at once; each part covers its owner's partitions."""
        groups = groups if groups is not None else plan(self.tier.view, topic.topic, topic.partitions, self.here)

        async def one(owner: str, partitions: list[int]) -> Part:
            candidates = [owner, *self.tier.view.standbys(topic.topic, partitions[0])] if owner != self.here \
                else [owner]
            ask = self._ask(scope, body, **{PARTITIONS: partitions_header(partitions)}, **extra)
            return await self.forwarder.ask(store, partitions, candidates, ask)

        return list(await asyncio.gather(*(one(owner, ps) for owner, ps in sorted(groups.items()))))

    async def _merged(self, scope: Scope, receive: Receive, send: Send, parts: list[Part],
                      shape: Callable[[list[dict[str, Any]]], dict[str, Any]]) -> None:
        """The merged answer of the parts; the first part that failed is the answer when one did."""
        failed = next((p for p in parts if p.status != 200), None)
        if failed is not None:
            await self._relay(scope, receive, send, failed, failed.served_by)
            return
        bodies = [json.loads(p.body) for p in parts]
        body = shape(bodies)
        metas = [b["meta"] for b in bodies]
        meta = dict(merge.stalest(metas))
        latest = {k: v for m in metas for k, v in (m.get("latest") or {}).items()}
        if latest:
            meta["latest"] = dict(sorted(latest.items(), key=lambda kv: int(kv[0])))
        body["meta"] = meta
        weakest = parts[metas.index(merge.stalest(metas))]
        headers = {k: v for k, v in weakest.headers.items() if k.lower().startswith("x-deltastate-")}
        answer = JSONAnswer(body, headers=headers)
        answer.raw_headers += served_headers(sorted({p.served_by for p in parts}),
                                              sorted({p.served_by for p in parts if p.standby}))
        await answer(scope, receive, send)

    # -- scattered reads ---------------------------------------------------------------------------------
    async def _scatter(self, scope: Scope, receive: Receive, send: Send, store: str, read: str) -> None:
        topic = self._topic(store)
        if topic is None or set(plan(self.tier.view, topic.topic, topic.partitions, self.here)) == {self.here}:
            await self._local(scope, receive, send)  # this instance answers for every partition
            return
        params = dict(parse_qsl(scope["query_string"].decode("latin-1"), keep_blank_values=True))
        definition = self.state.queries.store(store)
        parts = await self._parts(store, topic, scope)
        if read == "top":
            by = params.get("by") or definition.leaderboard_default_by or ""
            n = int(params.get("n", "10")) if params.get("n", "10").isdigit() else 10

            def shape(bodies: list[dict[str, Any]]) -> dict[str, Any]:
                return {"store": store, "columns": merge.columns_of(bodies),
                        "rows": merge.merge_top((b["rows"] for b in bodies), by, n)}
        else:
            keys = store_key_columns(definition)
            raw = params.get("limit", "")
            limit = int(raw) if raw.isdigit() else self.state.options.page_default

            def shape(bodies: list[dict[str, Any]]) -> dict[str, Any]:
                rows = merge.merge_pages((b["rows"] for b in bodies), keys, limit)
                cursor = encode_cursor([rows[-1][c] for c in keys]) if len(rows) == limit and rows else None
                return {"store": store, "columns": merge.columns_of(bodies), "rows": rows, "next_cursor": cursor}

        await self._merged(scope, receive, send, parts, shape)

    async def _rank(self, scope: Scope, receive: Receive, send: Send, store: str, key: str) -> None:
        topic = self._topic(store)
        groups = None if topic is None else plan(self.tier.view, topic.topic, topic.partitions, self.here)
        if topic is None or groups is None or set(groups) == {self.here}:
            await self._local(scope, receive, send)
            return
        partition = partition_for(key, topic.partitions)
        home = next(owner for owner, ps in groups.items() if partition in ps)
        [first] = await self._parts(store, topic, scope, groups={home: groups[home]})
        if first.status != 200:
            await self._relay(scope, receive, send, first, first.served_by)
            return
        row = json.loads(first.body)["row"]
        value = next(v for k, v in row.items() if k not in ("rank", "key"))
        others = {owner: ps for owner, ps in groups.items() if owner != home}
        rest = await self._parts(store, topic, scope, groups=others, **{RANK_VALUE: json.dumps(value)})

        def shape(bodies: list[dict[str, Any]]) -> dict[str, Any]:
            rank = merge.merge_rank(bodies[0]["rank"], (b["rank"] for b in bodies[1:]))
            return {"store": store, "key": bodies[0]["key"], "rank": rank, "row": {**bodies[0]["row"], "rank": rank}}

        await self._merged(scope, receive, send, [first, *rest], shape)

    async def _batch(self, scope: Scope, receive: Receive, send: Send, store: str) -> None:
        body, more = b"", True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away
            body += message.get("body", b"")
            more = message.get("more_body", False)
        replay = _replay(body)
        topic = self._topic(store)
        keys = batch_keys(body, BATCH_GET_MAX)
        if topic is None or keys is None:
            await self.app(scope, replay, send)  # the endpoint judges the request and names what is wrong
            return
        groups: dict[str, list[str]] = {}
        partitions: dict[str, set[int]] = {}
        for key in dict.fromkeys(keys):
            p = partition_for(key, topic.partitions)
            owner = self.tier.view.owner(topic.topic, p) or self.here
            groups.setdefault(owner, []).append(key)
            partitions.setdefault(owner, set()).add(p)
        if set(groups) == {self.here}:
            await self._local(scope, replay, send, partitions=sorted(partitions[self.here]))
            return

        async def one(owner: str) -> Part:
            asked = sorted(partitions[owner])
            candidates = [owner, *self.tier.view.standbys(topic.topic, asked[0])] if owner != self.here else [owner]
            sub = json.dumps({"keys": groups[owner]}).encode()
            headers = [(k, v) for k, v in scope["headers"] if k.lower() != b"content-type"]
            ask = Ask("POST", scope.get("raw_path") or scope["path"].encode(), scope["query_string"],
                      [*headers, (b"content-type", b"application/json")], sub,
                      ((PARTITIONS, partitions_header(asked)),))
            return await self.forwarder.ask(store, asked, candidates, ask)

        parts = list(await asyncio.gather(*(one(owner) for owner in sorted(groups))))

        def shape(bodies: list[dict[str, Any]]) -> dict[str, Any]:
            rows, missing = merge.merge_batch(keys, (b["rows"] for b in bodies))
            return {"store": store, "columns": merge.columns_of(bodies), "rows": rows, "missing": missing}

        await self._merged(scope, receive, send, parts, shape)


def _replay(body: bytes) -> Receive:
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return {"type": "http.disconnect"}

    return receive


__all__ = ["TierRouter"]
