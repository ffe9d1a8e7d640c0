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
from local_infra import free_port

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
