"""Prometheus metrics of gpuctrl.runtime: the shared registry and the work-queue metrics.

``METRICS_REGISTRY`` is the one registry a manager serves on ``/metrics``: process, platform and
garbage-collector metrics are registered in it at import, and every gpuctrl.runtime metric goes
there too (controllers add their own collectors to it).

Work-queue metrics carry controller-runtime's names and the labels ``name`` and ``controller``
(both the queue's name). To keep ``add``/``get``/``done`` cheap, a queue updates plain
counters and bucket arrays (``QueueMetrics``) and nothing Prometheus-aware runs on the hot path:
``QueueMetricsProvider`` is a collector that turns them into samples when scraped, and reads
the gauges (depth, unfinished work, longest running processor) from the live queues then.
Queues sharing a name share their series, as in controller-runtime.
"""

from __future__ import annotations

import weakref
from bisect import bisect_left
from collections.abc import Iterator
from typing import Protocol

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

__all__ = [
    "METRICS_REGISTRY",
    "QUEUE_METRICS",
    "Histogram",
    "QueueMetrics",
    "QueueMetricsProvider",
]

METRICS_REGISTRY = CollectorRegistry(auto_describe=True)
"""The registry a manager serves on ``/metrics``; every gpuctrl.runtime metric is in it."""
for _collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
    METRICS_REGISTRY.register(_collector)

# controller-runtime: prometheus.ExponentialBuckets(10e-9, 10, 12), i.e. 10 ns to 1000 s.
_DURATION_BUCKETS = tuple(10.0**exponent for exponent in range(-8, 4))
_LABELS = ("name", "controller")


class Histogram:
    """A Prometheus-style histogram kept as plain numbers; ``observe`` is a bisect and two adds."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: tuple[float, ...] = _DURATION_BUCKETS) -> None:
        self.bounds = bounds  # upper bounds (``le``), ascending; +Inf is implied
        self.counts = [0] * (len(bounds) + 1)  # per bucket, not cumulative; last one is +Inf
        self.total = 0.0  # sum of observed values

    def observe(self, value: float) -> None:
        """Count ``value`` in the first bucket whose upper bound is >= value."""
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value

    def cumulative(self) -> list[tuple[str, float]]:
        """``(le, number of values <= le)`` pairs up to ``+Inf``, as Prometheus exposes them."""
        pairs: list[tuple[str, float]] = []
        running = 0
        for bound, count in zip((*map(repr, self.bounds), "+Inf"), self.counts, strict=True):
            running += count
            pairs.append((bound, running))
        return pairs


class QueueGauges(Protocol):
    """What a live queue tells its metrics when they are collected."""

    def _gauges(self) -> tuple[int, float, float]:
        """(depth, seconds of unfinished work, seconds of the longest running processor)."""
        ...


class QueueMetrics:
    """The metrics of the queues with one name: counters the queues bump, gauges read on scrape.

    The queues owe: ``adds += 1`` per accepted add, ``retries += 1`` per ``add_after``, a
    ``queue_duration`` observation per ``get`` and a ``work_duration`` observation per ``done``.
    """

    __slots__ = ("adds", "name", "queue_duration", "queues", "retries", "work_duration")

    def __init__(self, name: str) -> None:
        self.name = name
        self.adds = 0
        self.retries = 0
        self.queue_duration = Histogram()  # seconds from add to get
        self.work_duration = Histogram()  # seconds from get to done
        self.queues: weakref.WeakSet[QueueGauges] = weakref.WeakSet()  # live queues of this name

    def gauges(self) -> tuple[int, float, float]:
        """Depth and unfinished seconds summed over the live queues; the longest processor."""
        depth, unfinished, longest = 0, 0.0, 0.0
        for queue in list(self.queues):
            queue_depth, queue_unfinished, queue_longest = queue._gauges()
            depth += queue_depth
            unfinished += queue_unfinished
            longest = max(longest, queue_longest)
        return depth, unfinished, longest


class QueueMetricsProvider:
    """Hands each named queue its ``QueueMetrics`` and exposes them all as one collector.

    It registers itself in ``registry`` (``METRICS_REGISTRY`` unless given another one).
    """

    def __init__(self, registry: CollectorRegistry | None = METRICS_REGISTRY) -> None:
        self._by_name: dict[str, QueueMetrics] = {}
        if registry is not None:
            registry.register(self)

    def for_queue(self, name: str, queue: QueueGauges) -> QueueMetrics:
        """The metrics for queues named ``name``, with ``queue`` added to the live ones."""
        metrics = self._by_name.get(name)
        if metrics is None:
            metrics = self._by_name[name] = QueueMetrics(name)
        metrics.queues.add(queue)
        return metrics

    def describe(self) -> Iterator[Metric]:
        """The metric families, without samples (lets the registry check names at register)."""
        return self._families([])

    def collect(self) -> Iterator[Metric]:
        """One sample per queue name for each of the seven work-queue metrics."""
        return self._families(list(self._by_name.values()))

    @staticmethod
    def _families(all_metrics: list[QueueMetrics]) -> Iterator[Metric]:
        depth = GaugeMetricFamily("workqueue_depth", "Current depth of workqueue", labels=_LABELS)
        adds = CounterMetricFamily(
            "workqueue_adds_total", "Total number of adds handled by workqueue", labels=_LABELS
        )
        queue_duration = HistogramMetricFamily(
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested",
            labels=_LABELS,
        )
        work_duration = HistogramMetricFamily(
            "workqueue_work_duration_seconds",
            "How long in seconds processing an item from workqueue takes.",
            labels=_LABELS,
        )
        unfinished = GaugeMetricFamily(
            "workqueue_unfinished_work_seconds",
            "How many seconds of work has been done that is in progress and hasn't been "
            "observed by work_duration. Large values indicate stuck threads. One can deduce "
            "the number of stuck threads by observing the rate at which this increases.",
            labels=_LABELS,
        )
        longest = GaugeMetricFamily(
            "workqueue_longest_running_processor_seconds",
            "How many seconds has the longest running processor for workqueue been running.",
            labels=_LABELS,
        )
        retries = CounterMetricFamily(
            "workqueue_retries_total",
            "Total number of retries handled by workqueue",
            labels=_LABELS,
        )
        for metrics in all_metrics:
            labels = [metrics.name, metrics.name]
            queue_depth, queue_unfinished, queue_longest = metrics.gauges()
            depth.add_metric(labels, queue_depth)
            adds.add_metric(labels, metrics.adds)
            queue_duration.add_metric(
                labels, metrics.queue_duration.cumulative(), metrics.queue_duration.total
            )
            work_duration.add_metric(
                labels, metrics.work_duration.cumulative(), metrics.work_duration.total
            )
            unfinished.add_metric(labels, queue_unfinished)
            longest.add_metric(labels, queue_longest)
            retries.add_metric(labels, metrics.retries)
        yield from (depth, adds, queue_duration, work_duration, unfinished, longest, retries)


QUEUE_METRICS = QueueMetricsProvider()
"""The provider work queues use by default; its metrics are in ``METRICS_REGISTRY``."""
