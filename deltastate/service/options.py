"""The service's options, frozen, from the environment (or built directly by tests and the bench).

DELTASTATE_API_TOKEN        when set, every endpoint but /health needs `Authorization: Bearer <token>`
DELTASTATE_SQL_TIMEOUT      seconds a POST /sql statement may run before it is interrupted (5)
DELTASTATE_SQL_MAX_ROWS     rows a POST /sql answer may have; more is refused, not truncated (10000)
DELTASTATE_PAGE_MAX         largest `limit` of range/all/windows pages (10000)
DELTASTATE_STALENESS_CACHE  seconds the newest-changelog-commit lookups are reused (0.5)
DELTASTATE_SERVICE_THREADS  worker threads running reads (4): more only adds GIL contention, which
                            starves the event loop that writes the answers on a small machine
DELTASTATE_FAST_PATH        1 (default): point reads answer through the fast path (fastpath.py);
                            0: every request goes through FastAPI (same answers, slower)
DELTASTATE_FOLLOW_COMMITS   seconds between merges of new changelog commits into the committed-read
                            overlays, in the background (1; 0 turns it off: reads merge them)
DELTASTATE_ADVERTISED_URL   when set, the instance is one of a query tier (tier/options.py)
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from deltastate.errors import ConfigError
from deltastate.service.tier.options import TierOptions


@dataclass(frozen=True)
class ServiceOptions:
    api_token: str | None = None
    sql_timeout_s: float = 5.0
    sql_max_rows: int = 10_000
    page_default: int = 100
    page_max: int = 10_000
    staleness_cache_s: float = 0.5
    worker_threads: int = 4
    fast_path: bool = True
    follow_commits_s: float = 1.0  # 0: committed reads merge new commits themselves (follower.py)
    tier: TierOptions | None = None  # None: a single instance answers every read itself

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> ServiceOptions:
        env = dict(os.environ if env is None else env)

        def number(name: str, default: float, kind: type) -> float:
            raw = env.get(name)
            try:
                value = kind(raw) if raw not in (None, "") else default
            except ValueError:
                raise ConfigError(f"{name}={raw!r} is not a {kind.__name__}") from None
            if value <= 0:
                raise ConfigError(f"{name} must be positive, got {value}")
            return value

        fast_path = env.get("DELTASTATE_FAST_PATH", "1").strip()
        if fast_path not in ("0", "1"):
            raise ConfigError(f"DELTASTATE_FAST_PATH={fast_path!r} is not 0 or 1")
        follow = env.get("DELTASTATE_FOLLOW_COMMITS", "").strip()
        try:
            follow_s = float(follow) if follow else cls.follow_commits_s
        except ValueError:
            raise ConfigError(f"DELTASTATE_FOLLOW_COMMITS={follow!r} is not a number of seconds") from None
        if follow_s < 0:
            raise ConfigError(f"DELTASTATE_FOLLOW_COMMITS must be 0 (off) or positive, got {follow_s}")
        return cls(api_token=env.get("DELTASTATE_API_TOKEN") or None, fast_path=fast_path == "1",
                   sql_timeout_s=number("DELTASTATE_SQL_TIMEOUT", cls.sql_timeout_s, float),
                   sql_max_rows=int(number("DELTASTATE_SQL_MAX_ROWS", cls.sql_max_rows, int)),
                   page_max=int(number("DELTASTATE_PAGE_MAX", cls.page_max, int)),
                   staleness_cache_s=number("DELTASTATE_STALENESS_CACHE", cls.staleness_cache_s, float),
                   worker_threads=int(number("DELTASTATE_SERVICE_THREADS", cls.worker_threads, int)),
                   follow_commits_s=follow_s, tier=TierOptions.from_env(env))

    def to_env(self) -> dict[str, str]:
        """The environment from which from_env() gives these options (for worker processes)."""
        env = {"DELTASTATE_SQL_TIMEOUT": str(self.sql_timeout_s), "DELTASTATE_SQL_MAX_ROWS": str(self.sql_max_rows),
               "DELTASTATE_PAGE_MAX": str(self.page_max), "DELTASTATE_STALENESS_CACHE": str(self.staleness_cache_s),
               "DELTASTATE_SERVICE_THREADS": str(self.worker_threads),
               "DELTASTATE_FAST_PATH": "1" if self.fast_path else "0",
               "DELTASTATE_FOLLOW_COMMITS": str(self.follow_commits_s)}
        if self.api_token:
            env["DELTASTATE_API_TOKEN"] = self.api_token
        if self.tier is not None:
            env.update(self.tier.to_env())
        return env


__all__ = ["ServiceOptions"]
