"""A single-node Apache Kafka 4.x broker (KRaft, combined broker+controller) on 127.0.0.1.

Why our own broker: the streaming engine and its tests need a real Kafka with real group
coordination and transactions, and a JVM started from Maven-fetched jars needs no Docker or system
install. Everything (ports, data, logs, pid) comes from Settings, so tests can run a private broker
beside a developer's one.
"""

from __future__ import annotations

import base64
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from deltastate.config import Settings
from deltastate.errors import InfraError
from deltastate.infra.jars import broker_classpath, ensure_jars

STARTED_LINE = "Kafka Server started"
HEAP = ("-Xms256m", "-Xmx768m")
LOG_TAIL_LINES = 30


@dataclass(frozen=True)
class BrokerStatus:
    """A snapshot of what runs where, for `deltastate infra status` and for callers deciding to start."""

    running: bool
    pid: int | None
    bootstrap: str
    data_dir: Path
    log_file: Path
    topics: int | None  # user topics (names not starting with "__"), only when running


def _size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def _read_from(path: Path, offset: int) -> str:
    """What a log gained since offset; logs append across runs, and an old run must not count."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def _tail(paths: dict[Path, int], lines: int = LOG_TAIL_LINES) -> str:
    """The last lines each file gained after the given byte offset (this start's output only)."""
    out: list[str] = []
    for path, offset in paths.items():
        text = _read_from(path, offset).splitlines()[-lines:]
        if text:
            out.append(f"--- last lines of {path} ---")
            out.extend(text)
    return "\n".join(out) or "(no broker output)"


def _port_free(port: int) -> bool:
    """Whether 127.0.0.1:port can be bound; SO_REUSEADDR mirrors the JVM, so TIME_WAIT is no clash."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _reaped(pid: int) -> bool:
    """Reap pid if it is our exited child (else it lingers as a zombie that still "exists")."""
    try:
        return os.waitpid(pid, os.WNOHANG)[0] == pid
    except ChildProcessError:
        return False


def _alive(pid: int) -> bool:
    """True when pid (from the pid file) is a live, non-zombie Kafka JVM; a reused pid running something
    else is dead. Not for a child just spawned: until the kernel finishes its exec, a new process's
    cmdline reads empty (seen here in 23 of 300 java starts), so it would look dead."""
    if _reaped(pid):
        return False
    try:
        os.kill(pid, 0)  # PermissionError: another user's process, so not ours
        proc = Path(f"/proc/{pid}")
        if proc.exists():
            return ") Z" not in (proc / "stat").read_text() and b"kafka.Kafka" in (proc / "cmdline").read_bytes()
    except OSError:
        return False
    return True


def _exit_reason(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit code {returncode}"


def _await_exit(pid: int, timeout: float = 10) -> None:
    """Wait until pid is gone from the process table, reaping it if it is our child. Why: a JVM whose
    command line has vanished is still exiting and may hold its ports for a moment longer."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not _reaped(pid):
        try:
            os.kill(pid, 0)
        except OSError:
            return
        time.sleep(0.05)


class LocalBroker:
    """Start, stop and inspect the local broker described by a Settings object."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.dir = settings.kafka_dir
        self.data_dir = self.dir / "data"
        self.log_file = self.dir / "broker.log"
        self.out_file = self.dir / "broker.out"
        self.pid_file = self.dir / "broker.pid"
        self.properties_file = self.dir / "server.properties"
        self.log4j_file = self.dir / "log4j2.properties"
        self.bootstrap = f"127.0.0.1:{settings.broker_port}"

    def up(self, timeout: float = 90) -> str:
        """Start the broker unless ours already runs; wait until it serves metadata; return bootstrap."""
        pid = self._pid()
        if pid is not None:
            self._wait_ready(pid, timeout, offsets={self.log_file: 0, self.out_file: 0})
            return self.bootstrap
        java = shutil.which("java")
        if java is None:
            raise InfraError("Java (`java`) is not on PATH; the local Kafka broker needs a JDK 17+")
        for name, port in (("broker", self.settings.broker_port), ("controller", self.settings.controller_port)):
            if not _port_free(port):
                env = "DELTASTATE_BROKER_PORT" if name == "broker" else "DELTASTATE_CONTROLLER_PORT"
                raise InfraError(
                    f"cannot start the local Kafka broker: {name} port 127.0.0.1:{port} is already in use "
                    f"by another process; stop that process or choose another port with {env}"
                )
        ensure_jars(self.settings, ("broker",))
        self._write_config()
        self._format(java)
        offsets = {self.log_file: _size(self.log_file), self.out_file: _size(self.out_file)}
        cmd = [
            java, *HEAP, "-Djava.awt.headless=true", f"-Dlog4j2.configurationFile={self.log4j_file}",
            "-cp", broker_classpath(self.settings), "kafka.Kafka", str(self.properties_file),
        ]
        with open(self.out_file, "ab") as out:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    cwd=self.dir, start_new_session=True)
        self.pid_file.write_text(f"{proc.pid}\n")
        try:
            self._wait_ready(proc.pid, timeout, offsets=offsets, exited=proc.poll)
        except InfraError:
            self._stop(proc.pid, grace=10)
            raise
        return self.bootstrap

    def down(self, timeout: float = 30) -> bool:
        """Stop the broker with SIGTERM (a clean shutdown), SIGKILL after timeout; True if it ran."""
        pid = self._pid()
        if pid is None:
            return False
        self._stop(pid, grace=timeout)
        return True

    def status(self) -> BrokerStatus:
        pid = self._pid()
        topics = self._topic_count() if pid is not None else None
        return BrokerStatus(running=pid is not None, pid=pid, bootstrap=self.bootstrap, data_dir=self.data_dir,
                            log_file=self.log_file, topics=topics)

    def _pid(self) -> int | None:
        """Our broker's pid if it is alive; a stale pid file is removed."""
        try:
            pid = int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None
        if _alive(pid):
            return pid
        self.pid_file.unlink(missing_ok=True)
        return None

    def _cluster_id(self) -> str:
        """A stable cluster id (Kafka's 22-char url-safe base64 uuid), created once per kafka dir."""
        path = self.dir / "cluster.id"
        if path.exists():
            return path.read_text().strip()
        while True:  # Kafka refuses ids starting with "-" (they read like command-line flags)
            cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
            if not cid.startswith("-"):
                break
        path.write_text(cid + "\n")
        return cid

    def _write_config(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        b, c = self.settings.broker_port, self.settings.controller_port
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.bootstrap.servers": f"127.0.0.1:{c}",
            "listeners": f"PLAINTEXT://127.0.0.1:{b},CONTROLLER://127.0.0.1:{c}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{b}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(self.data_dir),
            "offsets.topic.replication.factor": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "num.partitions": "4",
            "auto.create.topics.enable": "false",
        }
        self.properties_file.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        self.log4j_file.write_text(
            "status = warn\n"
            "shutdownHook = disable\n"
            "appender.file.type = File\n"
            "appender.file.name = file\n"
            f"appender.file.fileName = {self.log_file}\n"
            "appender.file.layout.type = PatternLayout\n"
            "appender.file.layout.pattern = [%d] %p %m (%c)%n\n"
            "rootLogger.level = INFO\n"
            "rootLogger.appenderRef.file.ref = file\n"
        )

    def _format(self, java: str) -> None:
        """Format the storage once; meta.properties marks a formatted log dir."""
        if (self.data_dir / "meta.properties").exists():
            return
        cmd = [java, "-cp", broker_classpath(self.settings), "kafka.tools.StorageTool", "format", "--standalone",
               "--ignore-formatted", "-t", self._cluster_id(), "-c", str(self.properties_file)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-LOG_TAIL_LINES:])
            raise InfraError(f"formatting Kafka storage in {self.data_dir} failed (exit {proc.returncode}):\n{tail}")

    def _wait_ready(self, pid: int, timeout: float, offsets: dict[Path, int],
                    exited: Callable[[], int | None] | None = None) -> None:
        """Wait for the "started" log line, then for a metadata request to succeed. exited is the
        child's poll when we spawned it: the pid-file check (_alive) misreads a process still in exec."""
        deadline = time.monotonic() + timeout
        while True:
            returncode = exited() if exited is not None else None
            if returncode is not None or (exited is None and not _alive(pid)):
                self.pid_file.unlink(missing_ok=True)
                how = f" ({_exit_reason(returncode)})" if returncode is not None else ""
                raise InfraError(f"the local Kafka broker (pid {pid}) exited during start-up{how}\n"
                                 f"{_tail(offsets)}")
            if STARTED_LINE in _read_from(self.log_file, offsets[self.log_file]) and self._topic_count(timeout=2.0) is not None:
                return
            if time.monotonic() > deadline:
                raise InfraError(f"the local Kafka broker (pid {pid}) was not ready within {timeout:.0f}s\n"
                                 f"{_tail(offsets)}")
            time.sleep(0.25)

    def _topic_count(self, timeout: float = 5.0) -> int | None:
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 3})
        try:
            meta = admin.list_topics(timeout=timeout)
        except KafkaException:
            return None
        return sum(1 for name in meta.topics if not name.startswith("__"))

    def _stop(self, pid: int, grace: float) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if _alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            while _alive(pid):
                time.sleep(0.1)
        _await_exit(pid)
        self.pid_file.unlink(missing_ok=True)
