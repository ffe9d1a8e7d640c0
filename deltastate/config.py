"""Settings, read once from the environment into a frozen object.

DELTASTATE_HOME   where local state lives (broker data, jars, Delta tables, checkpoints, snapshots);
                  default ./.deltastate. Any Hadoop-compatible URI works for DELTASTATE_STORAGE.
KAFKA_BOOTSTRAP   bootstrap servers; default: the local broker started by `deltastate infra up`.
SPARK_MASTER      Spark master URL; default local[*].
DELTASTATE_SHUFFLE_PARTITIONS  Spark's shuffle partitions, the state shards of a store started with
                  them; default: the cores a local master runs tasks on, 4 for a cluster's.
DELTASTATE_METRICS_PORT  port a continuous run serves /metrics on; 0 (default): a free port, printed.
DELTASTATE_PUSHGATEWAY   host:port (or URL) of a Prometheus Pushgateway short-lived jobs push to.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
LOCAL_BROKER_PORT = 19092
LOCAL_CONTROLLER_PORT = 19093


@dataclass(frozen=True)
class Settings:
    home: Path
    kafka_bootstrap: str
    spark_master: str
    storage_root: str
    schemas_dir: Path
    broker_port: int
    controller_port: int
    shuffle_partitions: int
    snapshot_keep: int
    max_value_bytes: int
    extra_spark_conf: dict[str, str] = field(default_factory=dict)
    metrics_port: int = 0
    pushgateway: str | None = None
    audit_flush_seconds: float = 10.0

    @property
    def jars_dir(self) -> Path:
        return self.home / "jars"

    @property
    def kafka_dir(self) -> Path:
        return self.home / "kafka"

    @property
    def snapshots_dir(self) -> Path:
        return self.home / "snapshots"

    def table_path(self, store: str, table: str) -> str:
        """Location of one of a store's Delta tables: changelog or deadletter."""
        return f"{self.storage_root.rstrip('/')}/stores/{store}/{table}"

    def checkpoint_path(self, store: str) -> str:
        return f"{self.storage_root.rstrip('/')}/checkpoints/{store}"

    def to_env(self) -> dict[str, str]:
        """The environment under which load_settings() in another process gives these settings."""
        return {"DELTASTATE_HOME": str(self.home), "DELTASTATE_STORAGE": self.storage_root,
                "DELTASTATE_SCHEMAS": str(self.schemas_dir), "KAFKA_BOOTSTRAP": self.kafka_bootstrap,
                "SPARK_MASTER": self.spark_master, "DELTASTATE_BROKER_PORT": str(self.broker_port),
                "DELTASTATE_CONTROLLER_PORT": str(self.controller_port),
                "DELTASTATE_SHUFFLE_PARTITIONS": str(self.shuffle_partitions),
                "DELTASTATE_SNAPSHOT_KEEP": str(self.snapshot_keep),
                "DELTASTATE_MAX_VALUE_BYTES": str(self.max_value_bytes),
                "DELTASTATE_AUDIT_FLUSH_SECONDS": str(self.audit_flush_seconds),
                **({"DELTASTATE_PUSHGATEWAY": self.pushgateway} if self.pushgateway else {})}

    @property
    def uses_local_broker(self) -> bool:
        return self.kafka_bootstrap == f"127.0.0.1:{self.broker_port}"


def load_settings(env: dict[str, str] | None = None) -> Settings:
    env = dict(os.environ if env is None else env)
    home = Path(env.get("DELTASTATE_HOME", ".deltastate")).expanduser().resolve()
    broker_port = int(env.get("DELTASTATE_BROKER_PORT", LOCAL_BROKER_PORT))
    controller_port = int(env.get("DELTASTATE_CONTROLLER_PORT", LOCAL_CONTROLLER_PORT))
    spark_master = env.get("SPARK_MASTER", "local[*]")
    return Settings(
        home=home,
        kafka_bootstrap=env.get("KAFKA_BOOTSTRAP", f"127.0.0.1:{broker_port}"),
        spark_master=spark_master,
        storage_root=env.get("DELTASTATE_STORAGE", str(home / "data")),
        schemas_dir=Path(env.get("DELTASTATE_SCHEMAS", PROJECT_ROOT / "schemas")),
        broker_port=broker_port,
        controller_port=controller_port,
        shuffle_partitions=_partitions(env.get("DELTASTATE_SHUFFLE_PARTITIONS", ""), spark_master),
        snapshot_keep=int(env.get("DELTASTATE_SNAPSHOT_KEEP", "3")),
        max_value_bytes=int(env.get("DELTASTATE_MAX_VALUE_BYTES", "65536")),
        metrics_port=_port(env.get("DELTASTATE_METRICS_PORT", "0")),
        pushgateway=env.get("DELTASTATE_PUSHGATEWAY", "").strip() or None,
        audit_flush_seconds=_seconds("DELTASTATE_AUDIT_FLUSH_SECONDS", env.get("DELTASTATE_AUDIT_FLUSH_SECONDS", "10")),
    )


def _seconds(name: str, text: str) -> float:
    """A non-negative number of seconds; anything else is refused by name."""
    from deltastate.errors import ConfigError

    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise ConfigError(f"{name} must be a number of seconds >= 0, not {text!r}")
    return value


def local_cores(spark_master: str) -> int | None:
    """The task slots of a local master (local, local[N], local[*], local[N,F]); None for a cluster's."""
    match = re.fullmatch(r"local(?:\[(\*|\d+)(?:,\d+)?\])?", spark_master.strip())
    if match is None:
        return None
    slots = match.group(1)
    if slots is None:
        return 1
    if slots == "*":
        return os.cpu_count() or 1
    return max(int(slots), 1)


def _partitions(text: str, spark_master: str) -> int:
    """DELTASTATE_SHUFFLE_PARTITIONS, a positive number; unset, one per task slot of a local master,
    so a batch's stateful stage runs in one wave of tasks (each task loads and commits its state
    shard and writes its own changelog file, whatever few records it has); 4 for a cluster's."""
    from deltastate.errors import ConfigError

    if not text.strip():
        return local_cores(spark_master) or 4
    try:
        partitions = int(text)
    except ValueError:
        partitions = 0
    if partitions < 1:
        raise ConfigError(f"DELTASTATE_SHUFFLE_PARTITIONS must be a whole number >= 1, not {text!r}")
    return partitions


def _port(text: str) -> int:
    """DELTASTATE_METRICS_PORT: 0 (a free port) or 1..65535; anything else is refused by name."""
    from deltastate.errors import ConfigError

    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise ConfigError(f"DELTASTATE_METRICS_PORT must be a port number 0..65535, got {text!r}")
    return port
