"""Shared fixtures: one real KRaft broker and one Spark session per test session, and per-test
settings with their own home (tables, checkpoints, snapshots) so tests never see each other's state.

The jar folders live in the project's .deltastate/jars (fetched once by `make setup` or on first
use) and are symlinked into every test home."""

from __future__ import annotations

import dataclasses
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support.local_infra import free_port, make_home

from deltastate.config import Settings, load_settings


@pytest.fixture(scope="session")
def session_settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    home = make_home(tmp_path_factory.mktemp("session-home"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DELTASTATE_", "KAFKA_"))}
    env.update(DELTASTATE_HOME=str(home), DELTASTATE_BROKER_PORT=str(free_port()),
               DELTASTATE_CONTROLLER_PORT=str(free_port()), DELTASTATE_SHUFFLE_PARTITIONS="2")
    return load_settings(env)


@pytest.fixture(scope="session")
def broker(session_settings: Settings) -> Iterator[str]:
    """A real single-node KRaft broker for the whole session; yields its bootstrap servers."""
    from deltastate.infra.broker import LocalBroker

    local = LocalBroker(session_settings)
    bootstrap = local.up(timeout=180)
    try:
        yield bootstrap
    finally:
        local.down()


@pytest.fixture(scope="session")
def spark(session_settings: Settings):
    """The process's Spark session (local, UI off, 2 shuffle partitions, Delta, RocksDB state). Its JVM
    keeps the default JIT: C1 alone (what the short-lived CLI children use) is slower in a process
    that runs as many batches as this one."""
    from deltastate.infra.spark import get_spark

    session = get_spark(session_settings, "deltastate-tests")
    yield session
    session.stop()


@pytest.fixture()
def make_settings(session_settings: Settings, tmp_path: Path) -> Callable[..., Settings]:
    """Settings for one test: its own home and storage, the session's broker and Spark config."""

    def build(name: str = "home", **overrides) -> Settings:
        home = make_home(tmp_path / name)
        return dataclasses.replace(session_settings, home=home, storage_root=str(home / "data"), **overrides)

    return build


@pytest.fixture()
def topic() -> str:
    """A fresh topic name, so a test reads only what it produced."""
    return f"t-{uuid.uuid4().hex[:10]}"


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):  # noqa: ANN001, ANN201 (xdist's hook)
    """`make test`'s workers take the longest files first (tests/support/scheduling.py)."""
    if config.getoption("dist") == "loadfile":
        from support.scheduling import LongestFirstScheduling

        return LongestFirstScheduling(config, log)
    return None
