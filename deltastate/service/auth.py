"""Optional bearer-token auth: configured (DELTASTATE_API_TOKEN) means every endpoint but /health,
/docs and the OpenAPI document needs `Authorization: Bearer <token>`; a missing or wrong token
gets 401 with a WWW-Authenticate challenge, never a hint of which part was wrong."""

from __future__ import annotations

import hmac

OPEN_PATHS = frozenset({"/health", "/docs", "/docs/oauth2-redirect", "/openapi.json", "/redoc"})


def authorized(token: str | None, path: str, header: str | None) -> bool:
    """Whether a request for path with this Authorization header may proceed."""
    if token is None or path in OPEN_PATHS:
        return True
    if not header:
        return False
    scheme, _, presented = header.partition(" ")
    if scheme.lower() != "bearer":
        return False
    # Constant-time: a token must not be guessable byte by byte from response times.
    return hmac.compare_digest(presented.strip().encode(), token.encode())


__all__ = ["OPEN_PATHS", "authorized"]
