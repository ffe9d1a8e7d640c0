"""Prometheus metrics of the query service, in a registry of its own (one per app, so tests and the
bench can build several apps in one process): request latency per endpoint, errors per endpoint and
status, snapshot swaps, the serving snapshot's version and age. Names: names.py."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from deltastate.metrics import names

# Point reads take well under a millisecond; SQL may take seconds.
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class ServiceMetrics:
    def __init__(self, published_at: Callable[[], datetime | None], version: Callable[[], int | None]) -> None:
        self.registry = CollectorRegistry()
        self.latency = Histogram(names.SERVICE_LATENCY, "Request latency by endpoint (route template)",
                                 ["endpoint", "method"], buckets=LATENCY_BUCKETS, registry=self.registry)
        self.requests = Counter(names.SERVICE_REQUESTS, "Requests by endpoint and HTTP status",
                                ["endpoint", "status"], registry=self.registry)
        self.errors = Counter(names.SERVICE_ERRORS, "Answers with status >= 400, by endpoint and error type",
                              ["endpoint", "status", "error"], registry=self.registry)
        self.swaps = Counter(names.SERVICE_SWAPS, "Times the service moved to a newer snapshot",
                             registry=self.registry)
        age = Gauge(names.SERVICE_SNAPSHOT_AGE, "Seconds since the serving snapshot was published",
                    registry=self.registry)
        age.set_function(lambda: _age(published_at()))
        current = Gauge(names.SERVICE_SNAPSHOT_VERSION, "Version of the serving snapshot (0: none yet)",
                        registry=self.registry)
        current.set_function(lambda: float(version() or 0))

    def observe(self, endpoint: str, method: str, status: int, seconds: float, error: str | None) -> None:
        self.latency.labels(endpoint, method).observe(seconds)
        self.requests.labels(endpoint, str(status)).inc()
        if status >= 400:
            self.errors.labels(endpoint, str(status), error or "http").inc()

    def render(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


def _age(published_at: datetime | None) -> float:
    if published_at is None:
        return float("nan")
    return (datetime.now(UTC).replace(tzinfo=None) - published_at).total_seconds()


__all__ = ["LATENCY_BUCKETS", "ServiceMetrics"]
