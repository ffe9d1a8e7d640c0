"""Sending a command to the home's resident driver, and asking it for its status or to stop.

`send_command` is called by the commands a driver runs (`run --once`, `job`) before they do
anything themselves: when a driver serves the home with the same fingerprint, the command runs
there and this process only relays its output and exit status.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from multiprocessing import AuthenticationError
from multiprocessing.connection import Client, Connection

import click

from deltastate.config import Settings
from deltastate.driver.protocol import FAMILY, DriverPaths, fingerprint
from deltastate.errors import InfraError

_serving = False  # true in the driver's own process: a command it runs never forwards itself


def in_driver(serving: bool | None = None) -> bool:
    """Whether this process is a resident driver (set once by the driver when it starts)."""
    global _serving
    if serving is not None:
        _serving = serving
    return _serving


def _connect(paths: DriverPaths) -> Connection | None:
    """A connection to the driver, or None when none listens (no socket, or one a killed driver left)."""
    try:
        return Client(str(paths.socket), FAMILY, authkey=paths.key.read_bytes())
    except (OSError, EOFError, AuthenticationError):
        return None


def _ask(settings: Settings, request: tuple) -> dict | None:
    conn = _connect(DriverPaths.of(settings))
    if conn is None:
        return None
    with conn:
        try:
            conn.send(request)
            return conn.recv()[1]
        except (EOFError, OSError):
            return None


def status(settings: Settings) -> dict | None:
    """The driver's pid, uptime, commands run and the one running; None when no driver serves the home."""
    return _ask(settings, ("status",))


def stop(settings: Settings) -> dict | None:
    """Ask the driver to stop once its running command ends; its status, or None when there is none."""
    return _ask(settings, ("stop",))


def command_line(ctx: click.Context) -> list[str]:
    """The arguments that give ctx's command its parameters, from the group down: `run player_stats --once ...`."""
    names, context = [], ctx
    while context.parent is not None:
        names.append(context.info_name or "")
        context = context.parent
    argv = list(reversed(names))
    for param in ctx.command.params:
        value = ctx.params.get(param.name or "")
        if isinstance(param, click.Argument):
            argv += [str(v) for v in value] if isinstance(value, tuple) else [str(value)]
        elif isinstance(param, click.Option) and param.is_bool_flag:
            if value or param.secondary_opts:
                argv.append(param.opts[0] if value else param.secondary_opts[0])
        elif isinstance(param, click.Option) and param.is_flag:  # one of several flags setting one value
            if value == param.flag_value:
                argv.append(param.opts[0])
        elif value is not None:
            for item in value if isinstance(value, tuple) else (value,):
                argv += [param.opts[0], str(item)]
    return argv


def send_command(settings: Settings, argv: list[str],
                 write: Callable[[str, str], None] | None = None) -> int | None:
    """argv's exit status from the home's resident driver, its output written as it comes (to this
    process's stdout and stderr, or to write(kind, text)); None when no driver serves the home, or
    when it serves other settings or code (said on stderr): the caller then runs the command itself."""
    if _serving:
        return None
    paths = DriverPaths.of(settings)
    conn = _connect(paths)
    if conn is None:
        return None
    write = write or _to_streams
    with conn:
        try:
            conn.send(("hello", fingerprint(settings)))
            kind, detail = conn.recv()
            if kind == "refused":
                write("err", f"note: the resident driver of {settings.home} runs with another "
                             f"{', '.join(detail)}; running here instead (`deltastate driver stop`, then "
                             "`deltastate driver start`, serves this one)\n")
                return None
            conn.send(("command", list(argv), os.getcwd()))
            while True:
                kind, payload = conn.recv()
                if kind == "exit":
                    return int(payload)
                write(kind, payload)
        except (EOFError, OSError) as exc:
            raise InfraError(f"the resident driver ended during `deltastate {' '.join(argv)}` "
                             f"({type(exc).__name__}); its log is {paths.log}; start it again with "
                             "`deltastate driver start`") from exc


def _to_streams(kind: str, text: str) -> None:
    stream = sys.stdout if kind == "out" else sys.stderr
    stream.write(text)
    stream.flush()
