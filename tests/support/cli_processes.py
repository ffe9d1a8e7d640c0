"""Running `deltastate` commands side by side (reads of a published snapshot, which start no Spark
driver), each still a new process, and runs in this process's own Spark session."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import TypeVar

from deltastate.config import Settings
from deltastate.engine import run_store
from deltastate.engine.common.report import RunResult
from deltastate.engine.common.writer_lock import release_checkpoint
from support.cli_runs import World, cli

T = TypeVar("T")


def concurrently(*calls: Callable[[], T]) -> list[T]:
    """Runs independent calls (each starts its own `deltastate` process) side by side; the results
    in the order given, the first failure raised."""
    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = [pool.submit(call) for call in calls]
        return [future.result() for future in futures]


def cli_each(world: World, commands: dict[str, tuple[str, ...]]) -> dict[str, subprocess.CompletedProcess]:
    """`cli` for each named command line, side by side: name -> the finished process."""
    done = concurrently(*(partial(cli, world, *args) for args in commands.values()))
    return dict(zip(commands, done, strict=True))


def run_here(settings: Settings, store: str, **options) -> RunResult:
    """One --once run in this process's Spark session; the writer lock is given back afterwards, so
    the store's later runs as commands can take it."""
    try:
        return run_store(settings, store, once=True, **options)
    finally:
        release_checkpoint(settings, store)
