"""Airflow's own metrics for Prometheus: Airflow 3 exports OpenTelemetry metrics (`[metrics] otel_on`)
over OTLP/HTTP; this bridge receives them (POST /v1/metrics, protobuf) and serves the latest value of
every series on /metrics in Prometheus' text format. Debian packages no StatsD or OTLP receiver for
Prometheus, and the Prometheus here predates its own OTLP receiver.

  python -m deltastate.metrics.otlp_bridge --otlp-port 4318 --metrics-port 9465

Names: the OTel name with every character outside [a-zA-Z0-9_] as "_" (airflow.ti.finish ->
airflow_ti_finish); sums become counters (monotonic) or gauges, gauges stay gauges, histograms
export their _count and _sum. Attributes become labels.
"""

from __future__ import annotations

import argparse
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

_INVALID = re.compile(r"[^a-zA-Z0-9_]")


def prom_name(name: str) -> str:
    out = _INVALID.sub("_", name)
    return f"_{out}" if out[:1].isdigit() else out


def _value(point) -> float:
    return float(point.as_double) if point.WhichOneof("value") == "as_double" else float(point.as_int)


def _labels(point) -> dict[str, str]:
    out = {}
    for kv in point.attributes:
        v = kv.value
        kind = v.WhichOneof("value")
        out[prom_name(kv.key)] = str(getattr(v, kind)) if kind else ""
    return out


class Latest(Collector):
    """The newest value of every series received, by (family name, kind) and label set."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.series: dict[tuple[str, str], dict[tuple[tuple[str, str], ...], float]] = {}
        self.received = 0

    def put(self, name: str, kind: str, labels: dict[str, str], value: float) -> None:
        with self._lock:
            self.series.setdefault((name, kind), {})[tuple(sorted(labels.items()))] = value

    def ingest(self, body: bytes) -> int:
        """Decodes one ExportMetricsServiceRequest; returns the data points taken."""
        from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

        request = ExportMetricsServiceRequest()
        request.ParseFromString(body)
        taken = 0
        for rm in request.resource_metrics:
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    name = prom_name(metric.name)
                    data = metric.WhichOneof("data")
                    if data == "sum":
                        kind = "counter" if metric.sum.is_monotonic else "gauge"
                        for p in metric.sum.data_points:
                            self.put(name, kind, _labels(p), _value(p))
                            taken += 1
                    elif data == "gauge":
                        for p in metric.gauge.data_points:
                            self.put(name, "gauge", _labels(p), _value(p))
                            taken += 1
                    elif data in ("histogram", "exponential_histogram"):
                        for p in getattr(metric, data).data_points:
                            self.put(f"{name}_count", "gauge", _labels(p), float(p.count))
                            self.put(f"{name}_sum", "gauge", _labels(p), float(p.sum))
                            taken += 1
        with self._lock:
            self.received += taken
        return taken

    def collect(self):
        with self._lock:
            snapshot = {k: dict(v) for k, v in self.series.items()}
        for (name, kind), points in sorted(snapshot.items()):
            names = sorted({k for labels in points for k, _ in labels})
            family = (CounterMetricFamily(name, f"Airflow {name}", labels=names) if kind == "counter"
                      else GaugeMetricFamily(name, f"Airflow {name}", labels=names))
            for labels, value in points.items():
                given = dict(labels)
                family.add_metric([given.get(n, "") for n in names], value)
            yield family


def serve(otlp_port: int, metrics_port: int, host: str = "0.0.0.0") -> tuple[ThreadingHTTPServer, Latest, int]:
    latest = Latest()
    registry = CollectorRegistry()
    registry.register(latest)
    metrics_server, _ = start_http_server(metrics_port, addr=host, registry=registry)

    class Receiver(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            if self.path.rstrip("/") != "/v1/metrics":
                self.send_error(404, "only /v1/metrics")
                return
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            try:
                latest.ingest(body)
            except Exception as exc:  # noqa: BLE001 - a bad payload is the sender's problem: 400
                self.send_error(400, f"not an OTLP metrics request: {exc}")
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args) -> None:
            pass

    receiver = ThreadingHTTPServer((host, otlp_port), Receiver)
    threading.Thread(target=receiver.serve_forever, daemon=True, name="otlp-receiver").start()
    return receiver, latest, int(metrics_server.server_port)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m deltastate.metrics.otlp_bridge", description=__doc__.split("\n")[0])
    parser.add_argument("--otlp-port", type=int, default=4318, help="OTLP/HTTP port Airflow exports to")
    parser.add_argument("--metrics-port", type=int, default=9465, help="port Prometheus scrapes (/metrics)")
    parser.add_argument("--host", default="0.0.0.0")
    args = parser.parse_args(argv)
    try:
        receiver, _latest, port = serve(args.otlp_port, args.metrics_port, args.host)
    except OSError as exc:
        parser.exit(2, f"error: cannot listen: {exc}\n")
    print(f"otlp on port {receiver.server_address[1]} (/v1/metrics), metrics on port {port} (/metrics)", flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
