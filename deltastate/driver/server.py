"""The resident driver: `deltastate driver serve` (in the foreground) or `deltastate driver start`.

It creates the home's Spark session once, then listens on HOME/driver/driver.sock for commands.
Each command runs in this process through the same click CLI and error handling as in a new
process, with its output relayed to the client as it is printed, and its exit status returned.
Commands run one at a time: they share one session, the working directory and the standard
streams; a client that arrives while a command runs waits for its turn. A command runs to its end
even if its client goes away, as `nohup` would run it.
"""

from __future__ import annotations

import fcntl
import io
import json
import os
import secrets
import threading
import time
import traceback
from collections.abc import Callable
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass, field
from multiprocessing import AuthenticationError
from multiprocessing.connection import Client, Connection, Listener

from deltastate.config import Settings
from deltastate.driver import client
from deltastate.driver.protocol import FAMILY, DriverPaths, differences, fingerprint, refusal
from deltastate.engine.common.writer_lock import release_all
from deltastate.errors import InfraError


@dataclass
class _DriverState:
    """What the connections' threads share: the one-command lock, the stop flag and the figures
    `deltastate driver status` shows."""

    paths: DriverPaths
    key: bytes
    fingerprint: dict[str, object]
    run: Callable[[list[str]], None]
    started: float = field(default_factory=time.time)
    run_lock: threading.Lock = field(default_factory=threading.Lock)
    stopping: threading.Event = field(default_factory=threading.Event)
    commands: int = 0
    running: list[str] | None = None

    def status(self) -> dict[str, object]:
        return {"pid": os.getpid(), "uptime_s": round(time.time() - self.started, 1), "commands": self.commands,
                "running": " ".join(self.running) if self.running else None, "log": str(self.paths.log),
                "stopping": self.stopping.is_set()}


class _Relay(io.TextIOBase):
    """A text stream that sends what is written to the client as (kind, text); once the client is
    gone the command's output is dropped and the command goes on."""

    def __init__(self, conn: Connection, kind: str, lock: threading.Lock) -> None:
        super().__init__()
        self.conn, self.kind, self.lock, self.gone = conn, kind, lock, False

    encoding = "utf-8"  # what click asks of a text stream before it writes str to it, not bytes
    errors = "strict"

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        if text and not self.gone:
            with self.lock:
                try:
                    self.conn.send((self.kind, text))
                except OSError:
                    self.gone = True
        return len(text)


def serve(settings: Settings, run: Callable[[list[str]], None], log=print) -> None:  # noqa: ANN001 (print-like)
    """Run the home's resident driver until a client asks it to stop. run(argv) runs one command as
    the `deltastate` program does (the CLI's entry point: it exits through SystemExit)."""
    paths = DriverPaths.of(settings)
    paths.folder.mkdir(parents=True, exist_ok=True)
    # One driver per home: an flock held for the driver's life, which the kernel drops however it ends.
    held = open(paths.lock, "a+")  # noqa: SIM115 (open until the process ends)
    try:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        found = client.status(settings)
        raise InfraError(f"a resident driver (pid {found['pid'] if found else 'starting'}) already serves "
                         f"{settings.home}; stop it first with `deltastate driver stop`") from None
    paths.socket.unlink(missing_ok=True)  # a driver that was killed leaves its socket behind
    key = secrets.token_bytes(32)
    descriptor = os.open(paths.key, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(key)
    from deltastate.infra.spark import get_spark

    get_spark(settings, "deltastate-driver")  # before listening: the first command finds the session up
    client.in_driver(True)
    state = _DriverState(paths, key, fingerprint(settings), run)
    listener = Listener(str(paths.socket), FAMILY, authkey=key)
    paths.info.write_text(json.dumps({"pid": os.getpid(), "fingerprint": state.fingerprint}))
    log(f"resident driver pid {os.getpid()} serving {settings.home} on {paths.socket}", flush=True)
    try:
        while not state.stopping.is_set():
            try:
                conn = listener.accept()
            except (ConnectionError, EOFError, AuthenticationError):
                continue  # a client that could not prove the key, or went away while connecting
            threading.Thread(target=_serve_connection, args=(conn, state), daemon=True).start()
    finally:
        listener.close()
        with state.run_lock:  # a command still running ends before the driver does
            for path in (paths.socket, paths.info):
                path.unlink(missing_ok=True)
        log(f"resident driver pid {os.getpid()} stopped after {state.commands} commands", flush=True)


def _serve_connection(conn: Connection, state: _DriverState) -> None:
    with conn:
        try:
            request = conn.recv()
            if request[0] == "status":
                conn.send(("status", state.status()))
            elif request[0] == "stop":
                state.stopping.set()
                conn.send(("stopping", state.status()))
                Client(str(state.paths.socket), FAMILY, authkey=state.key).close()  # wakes accept()
            elif request[0] == "hello":
                _run_for(conn, request[1], state)
        except (EOFError, OSError):
            pass  # the client went away


def _run_for(conn: Connection, theirs: dict[str, object], state: _DriverState) -> None:
    """One command for a client whose fingerprint matches the driver's."""
    differing = differences(state.fingerprint, theirs)
    if differing:
        conn.send(("refused", differing))
        return
    conn.send(("ready", {"pid": os.getpid()}))
    _, argv, cwd = conn.recv()
    refused = refusal(argv)
    if refused:
        conn.send(("err", f"error: {refused}\n"))
        conn.send(("exit", 2))
        return
    if state.run_lock.locked() and state.running:
        conn.send(("err", f"note: the resident driver is running `deltastate {' '.join(state.running)}`; "
                          "this command runs after it\n"))
    with state.run_lock:
        if state.stopping.is_set():
            conn.send(("err", "error: the resident driver is stopping; run the command again\n"))
            conn.send(("exit", 2))
            return
        state.running = argv
        try:
            code = _run_command(conn, state.run, argv, cwd)
        finally:
            # A process's writer locks end with it (engine/common/writer_lock.py); a command's end here.
            release_all()
            state.running, state.commands = None, state.commands + 1
    try:
        conn.send(("exit", code))
    except OSError:
        pass


def _run_command(conn: Connection, run: Callable[[list[str]], None], argv: list[str], cwd: str) -> int:
    """argv through the CLI as `deltastate` runs it, its output relayed; its exit status."""
    lock = threading.Lock()
    out, err = _Relay(conn, "out", lock), _Relay(conn, "err", lock)
    before = os.getcwd()
    try:
        os.chdir(cwd)
        with redirect_stdout(out), redirect_stderr(err):
            try:
                run(argv)
                return 0
            except SystemExit as exc:
                if exc.code is None or isinstance(exc.code, int):
                    return exc.code or 0
                print(exc.code, file=err)
                return 1
            except Exception:  # a bug: the trace a process would print, and the driver goes on
                traceback.print_exc(file=err)
                return 1
    finally:
        os.chdir(before)
