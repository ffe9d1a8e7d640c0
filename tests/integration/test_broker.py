"""A real single-node KRaft broker on free ports in a private DELTASTATE_HOME: start, reuse, serve
a message, refuse a taken port, stop."""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from support.local_infra import free_port

from deltastate.config import Settings, load_settings
from deltastate.errors import InfraError
from deltastate.infra.broker import LocalBroker

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def settings_for(home: Path, broker_port: int, controller_port: int) -> Settings:
    env = {k: v for k, v in os.environ.items() if k != "KAFKA_BOOTSTRAP"}
    env.update(DELTASTATE_HOME=str(home), DELTASTATE_BROKER_PORT=str(broker_port),
               DELTASTATE_CONTROLLER_PORT=str(controller_port))
    return load_settings(env)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBroker]:
    settings = settings_for(tmp_path_factory.mktemp("home"), free_port(), free_port())
    local = LocalBroker(settings)
    started = time.monotonic()
    local.up(timeout=120)
    print(f"broker ready in {time.monotonic() - started:.1f}s (jar fetch included)")
    try:
        yield local
    finally:
        local.down()


def test_up_is_idempotent_and_status_reports(broker: LocalBroker) -> None:
    first = broker.status()
    assert first.running and first.pid is not None
    assert broker.up() == f"127.0.0.1:{broker.settings.broker_port}"
    second = broker.status()
    assert second.pid == first.pid
    assert second.bootstrap == broker.settings.kafka_bootstrap
    assert second.data_dir == broker.settings.kafka_dir / "data"
    assert second.log_file.exists() and "Kafka Server started" in second.log_file.read_text()
    assert second.topics is not None


def test_produce_and_consume_one_message(broker: LocalBroker) -> None:
    bootstrap = broker.status().bootstrap
    topic = f"t-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})  # keep a reference until the future resolves
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=30)

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    producer.produce(topic, key=b"k1", value=b"v1")
    assert producer.flush(30) == 0

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}",
                         "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 60
        msg = None
        while time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                break
        assert msg is not None and msg.error() is None
        assert (msg.key(), msg.value()) == (b"k1", b"v1")
    finally:
        consumer.close()
    topics = broker.status().topics
    assert topics is not None and topics >= 1


def test_taken_port_gives_clear_error(broker: LocalBroker, tmp_path: Path) -> None:
    # The broker port is held by the running broker, which is another process for this home.
    other = LocalBroker(settings_for(tmp_path / "other", broker.settings.broker_port, free_port()))
    with pytest.raises(InfraError, match=rf"broker port 127\.0\.0\.1:{broker.settings.broker_port} is already in use"):
        other.up(timeout=30)

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        other = LocalBroker(settings_for(tmp_path / "other2", free_port(), taken))
        with pytest.raises(InfraError, match="DELTASTATE_CONTROLLER_PORT"):
            other.up(timeout=30)
    assert not other.status().running


def test_down_stops_the_process(broker: LocalBroker) -> None:
    pid = broker.status().pid
    assert pid is not None
    started = time.monotonic()
    assert broker.down() is True
    print(f"broker stopped in {time.monotonic() - started:.1f}s")
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    status = broker.status()
    assert not status.running and status.pid is None and status.topics is None
    assert broker.down() is False


def test_start_does_not_mistake_a_child_in_exec_for_a_dead_one(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    # Right after Popen returns, the kernel may not have finished the child's exec and its cmdline
    # reads empty, so the pid-file check calls it dead (CI once killed a healthy broker that way).
    # Make that check see "dead" for the whole start: the start must watch its own child instead.
    import deltastate.infra.broker as broker_module

    monkeypatch.setattr(broker_module, "_alive", lambda pid: False)
    local = LocalBroker(settings_for(tmp_path / "home", free_port(), free_port()))
    proc_pid = None
    try:
        assert local.up(timeout=120) == local.bootstrap
        proc_pid = int(local.pid_file.read_text())
        os.kill(proc_pid, 0)  # still running: the start did not give up on it
    finally:
        monkeypatch.undo()
        local.down()
    assert proc_pid is not None and not local.status().running


def test_a_broker_that_exits_during_start_says_how(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A `java` that does everything for real (Maven, storage format) but exits 3 instead of running
    # the broker.
    import shutil

    real_java = shutil.which("java")
    assert real_java is not None
    fake = tmp_path / "bin" / "java"
    fake.parent.mkdir()
    fake.write_text(f'#!/bin/sh\ncase "$*" in *" kafka.Kafka "*) exit 3;; esac\nexec "{real_java}" "$@"\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    local = LocalBroker(settings_for(tmp_path / "home", free_port(), free_port()))
    with pytest.raises(InfraError, match=r"exited during start-up \(exit code 3\)"):
        local.up(timeout=60)
    assert not local.status().running
