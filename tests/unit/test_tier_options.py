"""The query tier's settings: off without an advertised URL, refused with a message naming the
variable when a value is wrong, and carried to worker processes through the environment."""

from __future__ import annotations

import pytest

from deltastate.errors import ConfigError
from deltastate.service.options import ServiceOptions
from deltastate.service.tier.options import DEFAULT_GROUP, TierOptions


def test_off_without_an_advertised_url() -> None:
    assert TierOptions.from_env({}) is None
    assert ServiceOptions.from_env({}).tier is None


def test_read_from_the_environment_and_back() -> None:
    env = {"DELTASTATE_ADVERTISED_URL": "http://query-1:8000/", "DELTASTATE_TIER_GROUP": "tier-a",
           "DELTASTATE_TIER_SESSION_TIMEOUT": "10", "DELTASTATE_TIER_STANDBYS": "2", "DELTASTATE_TIER_TIMEOUT": "0.5"}
    options = TierOptions.from_env(env)
    assert options == TierOptions("http://query-1:8000/", "tier-a", 10.0, 2, 0.5)
    assert options.url == "http://query-1:8000"
    assert ServiceOptions.from_env(ServiceOptions.from_env(env).to_env()).tier == options
    assert TierOptions.from_env({"DELTASTATE_ADVERTISED_URL": "https://q:1"}).group == DEFAULT_GROUP


@pytest.mark.parametrize(("env", "named"), [
    ({"DELTASTATE_ADVERTISED_URL": "query-1:8000"}, "advertised URL"),
    ({"DELTASTATE_ADVERTISED_URL": "http://q:1/api"}, "advertised URL"),
    ({"DELTASTATE_ADVERTISED_URL": "http://q:1", "DELTASTATE_TIER_SESSION_TIMEOUT": "soon"},
     "DELTASTATE_TIER_SESSION_TIMEOUT"),
    ({"DELTASTATE_ADVERTISED_URL": "http://q:1", "DELTASTATE_TIER_TIMEOUT": "0"}, "DELTASTATE_TIER_TIMEOUT"),
    ({"DELTASTATE_ADVERTISED_URL": "http://q:1", "DELTASTATE_TIER_STANDBYS": "-1"}, "DELTASTATE_TIER_STANDBYS"),
])
def test_a_wrong_value_is_refused_naming_it(env: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        TierOptions.from_env(env)
