"""One hop to another instance of the tier: the owner first, then its standbys.

An instance that refuses the connection, breaks it, or does not answer within the timeout is passed
over for the next candidate, and remembered as down for one session timeout (by then Kafka has moved
its partitions, or it answers again), so a dead owner costs the reads after it nothing. An instance
that answers, with any status, has answered: its errors are the read's errors.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import httpx

from deltastate.errors import DeltastateError
from deltastate.service.tier.scope import FORWARDED

# Request headers that belong to one connection, not to the request.
_HOP = frozenset({b"host", b"content-length", b"connection", b"keep-alive", b"transfer-encoding", b"upgrade"})


class InstanceUnavailableError(DeltastateError):
    """No instance that answers for these partitions could be reached (REST answers 503)."""

    def __init__(self, store: str, partitions: Sequence[int], tried: Sequence[str]) -> None:
        super().__init__(f"store {store!r}: no instance answers for partition(s) "
                         f"{', '.join(map(str, partitions))}; tried {', '.join(tried) or 'none'}")
        self.store = store
        self.partitions = list(partitions)


@dataclass(frozen=True)
class Part:
    """What one instance answered."""

    status: int
    headers: httpx.Headers
    body: bytes
    served_by: str
    standby: bool  # a standby answered: the owner asked first did not


@dataclass(frozen=True)
class Ask:
    """One request to send: method, raw path and query, the client's headers, the body, plus the
    tier's own headers."""

    method: str
    raw_path: bytes
    query: bytes
    headers: Sequence[tuple[bytes, bytes]]
    body: bytes = b""
    extra: tuple[tuple[str, str], ...] = ()


class Forwarder:
    def __init__(self, here: str, timeout_s: float, down_for_s: float) -> None:
        self.here = here
        self.timeout_s = timeout_s
        self.down_for_s = down_for_s
        self._down: dict[str, float] = {}
        self._client: httpx.AsyncClient | None = None

    def _http(self) -> httpx.AsyncClient:
        # Made on first use, inside the server's event loop that every later request runs on.
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=self.timeout_s,
                                             limits=httpx.Limits(max_connections=64, max_keepalive_connections=32))
        return self._client

    def _order(self, candidates: Sequence[str]) -> list[str]:
        """The candidates up first, those recently down last (still tried: they may be back)."""
        now = time.monotonic()
        up = [c for c in candidates if self._down.get(c, 0.0) <= now]
        return up + [c for c in candidates if c not in up]

    async def ask(self, store: str, partitions: Sequence[int], candidates: Sequence[str], ask: Ask) -> Part:
        """The first answer of the candidates (owner, then standbys)."""
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in ask.headers if k.lower() not in _HOP]
        headers += [(FORWARDED, self.here), *ask.extra]
        tried = []
        for url in self._order(candidates):
            tried.append(url)
            target = url + ask.raw_path.decode("latin-1") + ("?" + ask.query.decode("latin-1") if ask.query else "")
            try:
                answer = await self._http().request(ask.method, target, headers=headers, content=ask.body or None)
            except (httpx.TransportError, AttributeError):
                # Refused, timed out, reset, or a pooled connection to a process that died broke on
                # the write (kill -9 leaves the socket half open): every way of not answering. A
                # connection the dying peer closes as it opens can also fail inside anyio, which then
                # asks the closed transport for its socket and finds None (an AttributeError from
                # the client's call, with no answer either).
                self._down[url] = time.monotonic() + self.down_for_s
                continue
            self._down.pop(url, None)
            return Part(answer.status_code, answer.headers, answer.content, url, url != candidates[0])
        raise InstanceUnavailableError(store, partitions, tried)

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()


__all__ = ["Ask", "Forwarder", "InstanceUnavailableError", "Part"]
