"""docker-compose.yml cannot run here (no Docker engine), so it is checked statically: the services
the project runs exist, every mount and build file is in the repository, every command names a real
entry point (an Airflow subcommand, a deltastate CLI command, a Spark class in the pinned pyspark),
every published port is unique, Prometheus scrapes every deltastate process and the Pushgateway, and
Grafana is provisioned with the dashboard in the repository."""

from __future__ import annotations

import importlib.util
import json
import re
import zipfile
from pathlib import Path

import click
import pytest
import yaml

from deltastate.config import PROJECT_ROOT

REQUIRED = {"kafka", "spark-master", "spark-worker", "airflow-postgres", "airflow-api-server",
            "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer", "query", "store-player-stats",
            "airflow-metrics", "prometheus", "pushgateway", "grafana"}
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
            assert args[0] in cli.list_commands(click.Context(cli)), (name, command)
        elif program == "spark-class":
            assert args[0] in spark_classes, (name, command)
        elif program == "python":
            assert args[0] == "-m" and importlib.util.find_spec(args[1]) is not None, (name, command)
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


def _scrape_targets(path: Path) -> dict[str, list[str]]:
    config = yaml.safe_load(path.read_text())
    return {job["job_name"]: [t for sc in job["static_configs"] for t in sc["targets"]]
            for job in config["scrape_configs"]}


def test_prometheus_scrapes_every_deltastate_process(compose):
    services = compose["services"]
    prometheus = services["prometheus"]
    mounted = {v.split(":")[1]: v.split(":")[0] for v in prometheus["volumes"]}
    config = PROJECT_ROOT / mounted["/etc/prometheus/prometheus.yml"]
    targets = _scrape_targets(config)
    scraped = {t.split(":")[0]: int(t.split(":")[1]) for ts in targets.values() for t in ts}
    # Every long-running deltastate process: the query service, each continuous store, the bridge.
    long_running = {name for name, svc in services.items()
                    if svc.get("command", [None])[0] in ("deltastate", "python")
                    and (svc["command"][1] == "serve" or "--continuous" in svc["command"] or "-m" in svc["command"])}
    assert long_running == set(scraped) - {"pushgateway"}, (long_running, scraped)
    assert scraped["query"] == 8000
    for name in long_running - {"query"}:
        cmd, env = services[name]["command"], services[name].get("environment", {})
        port = int(env.get("DELTASTATE_METRICS_PORT") or cmd[cmd.index("--metrics-port") + 1])
        assert scraped[name] == port, name
    pushgateway = yaml.safe_load(config.read_text())["scrape_configs"]
    assert any(job.get("honor_labels") for job in pushgateway if job["job_name"] == "pushgateway")
    env = compose["x-deltastate"]["environment"]
    assert env["DELTASTATE_PUSHGATEWAY"] == f"pushgateway:{scraped['pushgateway']}"
    assert env["AIRFLOW__METRICS__OTEL_ON"] == "True"
    assert env["OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"].startswith("http://airflow-metrics:4318/")


def test_grafana_provisions_the_dashboard(compose):
    grafana = compose["services"]["grafana"]
    mounted = {v.split(":")[1]: PROJECT_ROOT / v.split(":")[0] for v in grafana["volumes"]}
    provisioning = mounted["/etc/grafana/provisioning"]
    sources = yaml.safe_load((provisioning / "datasources" / "prometheus.yml").read_text())["datasources"]
    assert sources[0]["type"] == "prometheus" and sources[0]["url"] == "http://prometheus:9090"
    providers = yaml.safe_load((provisioning / "dashboards" / "deltastate.yml").read_text())["providers"]
    assert providers[0]["options"]["path"] == "/var/lib/grafana/dashboards"
    dashboards = mounted["/var/lib/grafana/dashboards"]
    doc = json.loads((dashboards / "deltastate.json").read_text())
    variables = {v["name"]: v for v in doc["templating"]["list"]}
    assert variables["store"]["includeAll"] and variables["datasource"]["query"] == "prometheus"
    panels = [p for p in doc["panels"] if p["type"] != "row"]
    assert len({p["id"] for p in doc["panels"]}) == len(doc["panels"])
    for panel in panels:
        assert panel["targets"] and all(t["expr"].strip() for t in panel["targets"]), panel["title"]
    # The panels a Kafka Streams user looks for.
    titles = " | ".join(p["title"].lower() for p in panels)
    for wanted in ("records in", "lag", "end-to-end latency", "commit latency", "put / get latency",
                   "restore remaining", "key count", "store size", "memory", "dirty ratio", "hit ratio",
                   "dropped records"):
        assert wanted in titles, wanted
