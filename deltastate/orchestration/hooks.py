"""The Spark provider's SparkSubmitHook, set up for deltastate: local jars, the driver's settings.

Why a subclass: the provider falls back to master "yarn" when its connection is missing. deltastate's
default is SPARK_MASTER (local[*] unless configured), so without an Airflow connection a task runs
where the CLI would, and with one (conn id `deltastate_spark`, type spark, host = the master URL such
as spark://spark-master:7077 or local[*]) the same DAG submits to a cluster.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

from deltastate.config import Settings

DEFAULT_CONN_ID = "deltastate_spark"
# Given to spark-submit as --master / --name instead of --conf, so the connection decides them.
_OWN_ARGS = ("spark.master", "spark.app.name")
# Environment a driver needs to build the same Settings as the worker that submitted it.
_PASSED_PREFIXES = ("DELTASTATE_", "KAFKA_BOOTSTRAP", "SPARK_MASTER", "JAVA_HOME", "PATH")


def driver_env(settings: Settings, master: str) -> dict[str, str]:
    """The driver's environment: the worker's deltastate settings, the resolved master, and the
    worker's Python for both driver and executors (a local[*] driver must import deltastate)."""
    env = {k: v for k, v in os.environ.items() if k.startswith(_PASSED_PREFIXES)}
    env.update(DELTASTATE_HOME=str(settings.home), DELTASTATE_STORAGE=settings.storage_root,
               KAFKA_BOOTSTRAP=settings.kafka_bootstrap, SPARK_MASTER=master,
               DELTASTATE_SCHEMAS=str(settings.schemas_dir),
               PYSPARK_PYTHON=os.environ.get("PYSPARK_PYTHON", sys.executable),
               PYSPARK_DRIVER_PYTHON=os.environ.get("PYSPARK_DRIVER_PYTHON", sys.executable))
    # spark-submit must be the one next to this Python (the pinned pyspark), not another on PATH.
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", os.defpath)])
    return env


def submit_conf(settings: Settings, app_name: str) -> dict[str, str]:
    """deltastate's Spark configuration (local jar paths, Delta, RocksDB) as spark-submit --conf."""
    from deltastate.infra.spark import spark_conf

    return {k: v for k, v in spark_conf(settings, app_name).items() if k not in _OWN_ARGS}


class DeltastateSparkHook(SparkSubmitHook):
    """SparkSubmitHook whose master defaults to the deltastate settings when no connection exists."""

    conn_name_attr = "conn_id"
    hook_name = "Deltastate Spark"

    def __init__(self, settings: Settings, *, conn_id: str = DEFAULT_CONN_ID, **kwargs: Any) -> None:
        self._fallback_master = settings.spark_master
        super().__init__(conn_id=conn_id, **kwargs)

    def _resolve_connection(self) -> dict[str, Any]:
        try:
            self.get_connection(self._conn_id)
            found = True
        except Exception:  # AirflowNotFoundException, or no Airflow context at all (plain scripts)
            found = False
        data = super()._resolve_connection()
        if not found:
            data["master"] = self._fallback_master
        return data

    @property
    def master(self) -> str:
        return str(self._connection["master"])
