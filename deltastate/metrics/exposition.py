"""How the job metrics leave the process: a long-running process serves them over HTTP
(/metrics on DELTASTATE_METRICS_PORT, 0 for a free port), a short-lived one pushes them to the
Pushgateway at DELTASTATE_PUSHGATEWAY, grouped by job and store, so the last push of each
(job, store) stays visible after the process is gone."""

from __future__ import annotations

import logging
import threading

from prometheus_client import CollectorRegistry, push_to_gateway, start_http_server
from prometheus_client.registry import Collector

from deltastate.config import Settings
from deltastate.errors import ConfigError
from deltastate.metrics.names import JOB_DONE, JOB_SECONDS, JOBS, PROCESS, PUSHED

log = logging.getLogger(__name__)
_served: dict[str, int] = {}
_lock = threading.Lock()


def serve(settings: Settings, host: str = "0.0.0.0") -> int:
    """Starts the /metrics endpoint once per process; returns the port it listens on."""
    with _lock:
        if "port" not in _served:
            try:
                server, _thread = start_http_server(settings.metrics_port, addr=host, registry=JOBS)
            except OSError as exc:
                raise ConfigError(f"DELTASTATE_METRICS_PORT {settings.metrics_port}: cannot listen ({exc})") from exc
            _served["port"] = int(server.server_port)
        return _served["port"]


class _Families(Collector):
    """The job's own families and the process figures: what one (job, store) group holds.

    A process that ran jobs for several stores holds samples of each; a push for one store carries
    that store's samples only, since the gateway would relabel the others with the group's store."""

    def __init__(self, kind: str, store: str | None = None) -> None:
        self.kind = kind
        self.store = store

    def _belongs(self, labels: dict[str, str]) -> bool:
        return self.store is None or labels.get("store", self.store) == self.store

    def collect(self):
        for metric in PUSHED[self.kind]:
            for family in metric.collect():
                family.samples = [s for s in family.samples if self._belongs(s.labels)]
                yield family
        for metric in (JOB_SECONDS, JOB_DONE):  # this kind's samples only
            for family in metric.collect():
                family.samples = [s for s in family.samples
                                  if s.labels.get("kind", "").startswith(self.kind) and self._belongs(s.labels)]
                yield family
        yield from PROCESS.collect()


def push(settings: Settings, job: str, store: str | None) -> bool:
    """Pushes the job kind's metrics under grouping (job, store); store None for a job of every
    store (publish), whose series keep their own store labels (a grouping label would replace them).
    False when no gateway is set or the push failed (logged: a job's work never fails for its metrics)."""
    if not settings.pushgateway:
        return False
    registry = CollectorRegistry(auto_describe=True)
    registry.register(_Families(job, store))
    try:
        push_to_gateway(settings.pushgateway, job=f"deltastate_{job}", grouping_key={} if store is None else {"store": store},
                        registry=registry, timeout=10)
        return True
    except OSError as exc:
        log.warning("metrics push to %s failed: %s", settings.pushgateway, exc)
        return False
