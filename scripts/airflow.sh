#!/usr/bin/env bash
# Airflow 3 for deltastate on this machine, in one command (`make airflow`): a local KRaft broker,
# an Airflow home under $DELTASTATE_HOME/airflow (SQLite, SimpleAuthManager), this checkout's dags/
# and plugins/, and `airflow standalone` (api-server, scheduler, dag-processor, triggerer).
# UI: http://127.0.0.1:${AIRFLOW_PORT:-8080}  user admin, password printed below.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.local/bin:$PATH"
ROOT="$(pwd)"
export DELTASTATE_HOME="${DELTASTATE_HOME:-$ROOT/.deltastate}"
export AIRFLOW_HOME="${AIRFLOW_HOME:-$DELTASTATE_HOME/airflow}"
export AIRFLOW__CORE__DAGS_FOLDER="$ROOT/dags"
export AIRFLOW__CORE__PLUGINS_FOLDER="$ROOT/plugins"
export AIRFLOW__CORE__LOAD_EXAMPLES=False
export AIRFLOW__API__PORT="${AIRFLOW_PORT:-8080}"
# Task processes report to the execution API on the same port.
export AIRFLOW__CORE__EXECUTION_API_SERVER_URL="http://127.0.0.1:$AIRFLOW__API__PORT/execution/"
# Airflow's own metrics (dag runs, task durations, failures, scheduler heartbeats): OpenTelemetry
# over OTLP/HTTP to deltastate's bridge, which serves them to Prometheus on /metrics.
OTLP_PORT="${DELTASTATE_AIRFLOW_OTLP_PORT:-4318}"
AIRFLOW_METRICS_PORT="${DELTASTATE_AIRFLOW_METRICS_PORT:-9465}"
export AIRFLOW__METRICS__OTEL_ON=True
export OTEL_EXPORTER_OTLP_METRICS_ENDPOINT="http://127.0.0.1:$OTLP_PORT/v1/metrics"
export OTEL_METRIC_EXPORT_INTERVAL="${OTEL_METRIC_EXPORT_INTERVAL:-10000}"
mkdir -p "$AIRFLOW_HOME"
uv run --frozen deltastate infra up
uv run --frozen python -m deltastate.metrics.otlp_bridge --host 127.0.0.1 --otlp-port "$OTLP_PORT" \
  --metrics-port "$AIRFLOW_METRICS_PORT" &
BRIDGE=$!
trap 'kill "$BRIDGE" 2>/dev/null || true' EXIT
echo "airflow: UI on http://127.0.0.1:$AIRFLOW__API__PORT (user admin; password in" \
     "$AIRFLOW_HOME/simple_auth_manager_passwords.json.generated once started)" >&2
echo "airflow: Data Docs under $DELTASTATE_HOME/quality/gx/uncommitted/data_docs/local_site/index.html" >&2
echo "airflow: its metrics for Prometheus on http://127.0.0.1:$AIRFLOW_METRICS_PORT/metrics" >&2
uv run --frozen airflow standalone
