"""The service's metrics live with every other metric in deltastate.metrics; this name stays for
the service's modules."""

from deltastate.metrics.service import LATENCY_BUCKETS, ServiceMetrics

__all__ = ["LATENCY_BUCKETS", "ServiceMetrics"]
