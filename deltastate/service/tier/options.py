"""The query tier's settings, frozen, from the environment. The tier is off unless an instance has
an advertised URL: one `serve` then answers everything itself, as it always has.

DELTASTATE_ADVERTISED_URL       this instance's URL as the other instances and clients reach it
                                (http://host:port); set by `serve --advertise URL`
DELTASTATE_TIER_GROUP           the Kafka consumer group the instances join (deltastate-serve); one
                                group per tier
DELTASTATE_TIER_SESSION_TIMEOUT seconds without a heartbeat before Kafka moves a dead instance's
                                partitions to the others (6: the broker's default minimum)
DELTASTATE_TIER_STANDBYS        standby instances per partition, when there are enough instances (1)
DELTASTATE_TIER_TIMEOUT         seconds an instance waits for another before asking the standby (2)
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from urllib.parse import urlsplit

from deltastate.errors import ConfigError

DEFAULT_GROUP = "deltastate-serve"


@dataclass(frozen=True)
class TierOptions:
    advertised_url: str
    group: str = DEFAULT_GROUP
    session_timeout_s: float = 6.0
    standbys: int = 1
    forward_timeout_s: float = 2.0
    refresh_s: float = 1.0  # how often the whole assignment is read back from the group

    def __post_init__(self) -> None:
        parts = urlsplit(self.advertised_url)
        if parts.scheme not in ("http", "https") or not parts.netloc or parts.path not in ("", "/"):
            raise ConfigError(f"advertised URL {self.advertised_url!r} is not http(s)://host:port")
        if self.standbys < 0:
            raise ConfigError(f"DELTASTATE_TIER_STANDBYS must be 0 or more, got {self.standbys}")

    @property
    def url(self) -> str:
        """The advertised URL without a trailing slash: the instance's name in the tier."""
        return self.advertised_url.rstrip("/")

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> TierOptions | None:
        env = dict(os.environ if env is None else env)
        url = (env.get("DELTASTATE_ADVERTISED_URL") or "").strip()
        if not url:
            return None

        def number(name: str, default: float) -> float:
            raw = env.get(name)
            try:
                value = float(raw) if raw not in (None, "") else default
            except ValueError:
                raise ConfigError(f"{name}={raw!r} is not a number") from None
            if value < 0 or (value == 0 and name != "DELTASTATE_TIER_STANDBYS"):
                raise ConfigError(f"{name} must be positive, got {value}")
            return value

        return cls(url, env.get("DELTASTATE_TIER_GROUP") or DEFAULT_GROUP,
                   number("DELTASTATE_TIER_SESSION_TIMEOUT", cls.session_timeout_s),
                   int(number("DELTASTATE_TIER_STANDBYS", cls.standbys)),
                   number("DELTASTATE_TIER_TIMEOUT", cls.forward_timeout_s))

    def to_env(self) -> dict[str, str]:
        return {"DELTASTATE_ADVERTISED_URL": self.advertised_url, "DELTASTATE_TIER_GROUP": self.group,
                "DELTASTATE_TIER_SESSION_TIMEOUT": str(self.session_timeout_s),
                "DELTASTATE_TIER_STANDBYS": str(self.standbys), "DELTASTATE_TIER_TIMEOUT": str(self.forward_timeout_s)}


__all__ = ["DEFAULT_GROUP", "TierOptions"]
