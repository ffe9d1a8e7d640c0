"""ServiceOptions from the environment: the commit follower's interval."""

from __future__ import annotations

import pytest

from deltastate.errors import ConfigError
from deltastate.service import ServiceOptions


def test_follow_commits_defaults_on_and_round_trips() -> None:
    assert ServiceOptions.from_env({}).follow_commits_s == 1.0
    off = ServiceOptions.from_env({"DELTASTATE_FOLLOW_COMMITS": "0"})
    assert off.follow_commits_s == 0.0
    assert ServiceOptions.from_env(off.to_env()).follow_commits_s == 0.0
    assert ServiceOptions.from_env({"DELTASTATE_FOLLOW_COMMITS": "0.25"}).follow_commits_s == 0.25


@pytest.mark.parametrize("raw", ["soon", "-1"])
def test_a_wrong_follow_interval_is_refused_naming_it(raw: str) -> None:
    with pytest.raises(ConfigError, match="DELTASTATE_FOLLOW_COMMITS"):
        ServiceOptions.from_env({"DELTASTATE_FOLLOW_COMMITS": raw})
