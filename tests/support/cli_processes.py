"""Running `deltastate` commands beside each other and beside this process's own Spark work: each
command is still a new process, started in its own process group so that a failure ends its JVM too."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import TypeVar

from deltastate.config import Settings
from deltastate.engine import run_store
from deltastate.engine.common.report import RunResult
from deltastate.engine.common.writer_lock import release_checkpoint
from support.cli_runs import DELTASTATE, World, clean, cli

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


def in_background(world: World, *args: str) -> subprocess.Popen:
    """`deltastate ARGS` started in its own process group (the CLI and its Spark JVM), not waited for."""
    return subprocess.Popen([DELTASTATE, *args], env=world.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)


def stop(proc: subprocess.Popen) -> None:
    """Ends a process started by in_background, its JVM with it."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()


def finished(proc: subprocess.Popen, timeout: float = 900) -> subprocess.CompletedProcess:
    """What `cli` checks, for a process started by in_background: no traceback, exit status 0."""
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except BaseException:
        stop(proc)
        raise
    done = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    clean(done)
    assert done.returncode == 0, (proc.args, done.returncode, stdout[-2000:], stderr[-3000:])
    return done


def run_here(settings: Settings, store: str, **options) -> RunResult:
    """One --once run in this process's Spark session; the writer lock is given back afterwards, so
    the store's later runs as commands can take it."""
    try:
        return run_store(settings, store, once=True, **options)
    finally:
        release_checkpoint(settings, store)
