#!/usr/bin/env bash
# Everything a fresh machine needs, from the project's own files: uv (pinned), the locked Python
# environment, the Maven jar folders and deltastate's Spark functions. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
UV_VERSION=0.13.9

need() { command -v "$1" >/dev/null 2>&1 || { echo "setup: '$1' is required ($2)" >&2; exit 1; }; }
need java "OpenJDK 17"
need javac "OpenJDK 17 JDK"
need mvn "Apache Maven"
need python3.11 "CPython 3.11"

if ! command -v uv >/dev/null 2>&1 || [ "$(uv --version | awk '{print $2}')" != "$UV_VERSION" ]; then
  echo "setup: installing uv $UV_VERSION" >&2
  python3.11 -m pip install --quiet --user "uv==$UV_VERSION" 2>/dev/null || python3.11 -m pip install --quiet "uv==$UV_VERSION"
  export PATH="$HOME/.local/bin:$PATH"
fi
# Bytecode compiled once here: with PYTHONDONTWRITEBYTECODE set (common on CI machines) nothing else
# writes it, and every process (a CLI command, an Airflow task, spark-submit's driver) would compile
# pyspark, pandas, Airflow and great-expectations from source again (`import great_expectations`:
# 13.6 s without, 6.8 s with, on 2 cores).
uv sync --frozen --python python3.11 --quiet --compile-bytecode
uv run --frozen python -m compileall -q deltastate dags plugins >/dev/null
# The browser test needs Debian's chromium and chromedriver; `make test` sets DELTASTATE_BROWSER=1.
browser="${DELTASTATE_BROWSER:-0}"
if [ "${browser//[[:space:]]/}" = 1 ] && ! { command -v chromium >/dev/null && command -v chromedriver >/dev/null; }; then
  echo "setup: installing chromium and chromium-driver (apt-get)" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null
fi
# The metrics test runs Debian's Prometheus and Pushgateway against the Grafana dashboard's queries.
if [ "${browser//[[:space:]]/}" = 1 ] && ! { command -v prometheus >/dev/null && command -v prometheus-pushgateway >/dev/null; }; then
  echo "setup: installing prometheus and prometheus-pushgateway (apt-get)" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus prometheus-pushgateway >/dev/null
fi
# The query bench drives the service with wrk; `make bench-query` sets DELTASTATE_WRK=1.
wrk_wanted="${DELTASTATE_WRK:-0}"
if [ "${wrk_wanted//[[:space:]]/}" = 1 ] && ! command -v wrk >/dev/null; then
  echo "setup: installing wrk (apt-get)" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >/dev/null
fi
uv run --frozen deltastate infra setup
