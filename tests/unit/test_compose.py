"""docker-compose.yml cannot run here (no Docker engine), so it is checked statically: the services
#5 asks for exist, every mount and build file is in the repository, every command names a real
entry point (an Airflow subcommand, a deltastate CLI command, a Spark class in the pinned pyspark),
and every published port is unique."""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

import pytest
import yaml

from deltastate.config import PROJECT_ROOT

REQUIRED = {"kafka", "spark-master", "spark-worker", "airflow-postgres", "airflow-api-server",
            "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer", "query"}
AIRFLOW_COMMANDS = {"api-server", "scheduler", "dag-processor", "triggerer", "db"}


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((PROJECT_ROOT / "docker-compose.yml").read_text())


def _spark_classes() -> set[str]:
    import pyspark

    classes: set[str] = set()
    for jar in (Path(pyspark.__file__).parent / "jars").glob("spark-core_*.jar"):
        with zipfile.ZipFile(jar) as zf:
            classes |= {n[:-6].replace("/", ".") for n in zf.namelist() if n.endswith(".class")}
    return classes


def test_services_ports_and_mounts_exist(compose):
    services = compose["services"]
    assert REQUIRED <= set(services)
    host_ports = []
    for name, svc in services.items():
        for port in svc.get("ports", []):
            host, container = str(port).split(":")
            assert host.isdigit() and container.isdigit(), (name, port)
            host_ports.append(int(host))
        for volume in svc.get("volumes", []):
            source, target = volume.split(":")[:2]
            assert target.startswith("/"), (name, volume)
            if source.startswith("."):
                assert (PROJECT_ROOT / source).exists(), (name, volume)
            else:
                assert source in compose["volumes"], (name, volume)
        build = svc.get("build")
        if build:
            assert (PROJECT_ROOT / build["context"] / build["dockerfile"]).is_file(), name
        for dep in svc.get("depends_on", []):
            assert dep in services, (name, dep)
    assert len(host_ports) == len(set(host_ports))
    mounted = {v.split(":")[0] for s in services.values() for v in s.get("volumes", [])}
    assert {"./dags", "./jobs", "./plugins", "./schemas"} <= mounted


def test_commands_name_real_entry_points(compose):
    from deltastate.cli.main import cli

    spark_classes = _spark_classes()
    for name, svc in compose["services"].items():
        command = svc.get("command")
        if command is None:
            continue
        program, *args = command
        if program == "airflow":
            assert args[0] in AIRFLOW_COMMANDS, (name, command)
        elif program == "deltastate":
            assert args[0] in cli.commands, (name, command)
        elif program == "spark-class":
            assert args[0] in spark_classes, (name, command)
        else:
            pytest.fail(f"{name}: unknown program {program!r}")
    env = compose["x-deltastate"]["environment"]
    assert env["SPARK_MASTER"] == "spark://spark-master:7077" and env["KAFKA_BOOTSTRAP"] == "kafka:9092"


def test_dockerfile_copies_only_what_exists(compose):
    dockerfile = (PROJECT_ROOT / "docker" / "Dockerfile").read_text()
    copied = re.findall(r"^COPY\s+(.+?)\s+\S+$", dockerfile, flags=re.M)
    assert copied
    for sources in copied:
        for source in sources.split():
            assert (PROJECT_ROOT / source).exists(), source
