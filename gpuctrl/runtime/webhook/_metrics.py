"""The webhook server's Prometheus metrics, under controller-runtime's names."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from .._metrics import METRICS_REGISTRY

__all__ = ["IN_FLIGHT", "LATENCY", "PANICS", "REQUESTS"]

REQUESTS = Counter(
    "controller_runtime_webhook_requests_total",
    "Total number of admission requests by HTTP status code.",
    ["webhook", "code"],
    registry=METRICS_REGISTRY,
)
LATENCY = Histogram(
    "controller_runtime_webhook_latency_seconds",
    "Histogram of the latency of processing admission requests",
    ["webhook"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
    registry=METRICS_REGISTRY,
)
IN_FLIGHT = Gauge(
    "controller_runtime_webhook_requests_in_flight",
    "Current number of admission requests being served.",
    ["webhook"],
    registry=METRICS_REGISTRY,
)
PANICS = Counter(
    "controller_runtime_webhook_panics_total",
    "Admission handlers that raised (the request was answered with allowed: false).",
    ["webhook"],
    registry=METRICS_REGISTRY,
)
