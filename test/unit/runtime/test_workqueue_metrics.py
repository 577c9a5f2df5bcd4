"""Work-queue metrics, read back through a Prometheus registry."""

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from gpuctrl.runtime import METRICS_REGISTRY, QueueMetricsProvider, WorkQueue
from gpuctrl.testing import FakeClock


class Scrape:
    """Reads one queue's samples from a registry."""

    def __init__(self, registry: CollectorRegistry, name: str) -> None:
        self.registry = registry
        self.labels = {"name": name, "controller": name}

    def __call__(self, sample: str, **labels: str) -> float | None:
        return self.registry.get_sample_value(sample, {**self.labels, **labels})


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def queue(clock: FakeClock, registry: CollectorRegistry) -> WorkQueue[str]:
    return WorkQueue("reconcile-things", clock=clock, metrics=QueueMetricsProvider(registry))


@pytest.fixture
def scrape(registry: CollectorRegistry) -> Scrape:
    return Scrape(registry, "reconcile-things")


async def test_adds_count_only_accepted_adds(queue: WorkQueue[str], scrape: Scrape) -> None:
    for key in "aab":
        queue.add(key)
    assert scrape("workqueue_adds_total") == 2
    assert scrape("workqueue_depth") == 2
    assert await queue.get() == "a"
    assert scrape("workqueue_depth") == 1
    queue.add("a")  # while processed: counted and dirty, as in client-go
    assert (scrape("workqueue_adds_total"), scrape("workqueue_depth")) == (3, 2)


async def test_durations_are_observed_on_the_queue_clock(
    queue: WorkQueue[str], clock: FakeClock, scrape: Scrape
) -> None:
    queue.add("a")
    await clock.step(2.5)
    assert await queue.get() == "a"
    await clock.step(0.05)
    queue.done("a")
    assert scrape("workqueue_queue_duration_seconds_count") == 1
    assert scrape("workqueue_queue_duration_seconds_sum") == 2.5
    assert scrape("workqueue_queue_duration_seconds_bucket", le="1.0") == 0
    assert scrape("workqueue_queue_duration_seconds_bucket", le="10.0") == 1
    assert scrape("workqueue_queue_duration_seconds_bucket", le="+Inf") == 1
    assert scrape("workqueue_work_duration_seconds_sum") == pytest.approx(0.05)
    assert scrape("workqueue_work_duration_seconds_bucket", le="0.01") == 0
    assert scrape("workqueue_work_duration_seconds_bucket", le="0.1") == 1


@pytest.mark.parametrize(
    ("le", "expected"),
    [("1e-08", 0), ("1e-05", 0), ("0.0001", 1), ("1000.0", 2), ("+Inf", 3)],
)
async def test_duration_buckets_are_controller_runtimes(
    queue: WorkQueue[str], clock: FakeClock, scrape: Scrape, le: str, expected: int
) -> None:
    for seconds in (0.0001, 1000.0, 5000.0):
        queue.add("a")
        await clock.step(seconds)
        await queue.get()
        queue.done("a")
    assert scrape("workqueue_queue_duration_seconds_bucket", le=le) == expected


async def test_unfinished_work_and_longest_processor_are_read_at_scrape(
    queue: WorkQueue[str], clock: FakeClock, scrape: Scrape
) -> None:
    queue.add("a")
    queue.add("b")
    await queue.get()
    await clock.step(2.0)
    await queue.get()
    await clock.step(1.0)
    assert scrape("workqueue_unfinished_work_seconds") == 4.0  # 3 s of a, 1 s of b
    assert scrape("workqueue_longest_running_processor_seconds") == 3.0
    queue.done("a")
    queue.done("b")
    assert scrape("workqueue_unfinished_work_seconds") == 0.0
    assert scrape("workqueue_longest_running_processor_seconds") == 0.0


async def test_every_add_after_counts_as_a_retry(queue: WorkQueue[str], scrape: Scrape) -> None:
    queue.add_rate_limited("a")
    queue.add_after("a", 10.0)
    queue.add_after("b", 0.0)
    assert scrape("workqueue_retries_total") == 3
    queue.shutdown()
    queue.add_after("c", 1.0)
    assert scrape("workqueue_retries_total") == 3


async def test_queues_with_one_name_share_their_series(
    clock: FakeClock, registry: CollectorRegistry
) -> None:
    provider = QueueMetricsProvider(registry)
    first: WorkQueue[str] = WorkQueue("shared", clock=clock, metrics=provider)
    second: WorkQueue[str] = WorkQueue("shared", clock=clock, metrics=provider)
    first.add("a")
    second.add("a")
    second.add("b")
    scrape = Scrape(registry, "shared")
    assert (scrape("workqueue_adds_total"), scrape("workqueue_depth")) == (3, 3)


@pytest.mark.parametrize(
    ("name", "metrics"),
    [pytest.param("", True, id="unnamed"), pytest.param("off", False, id="metrics=False")],
)
async def test_no_series_without_a_name_or_with_metrics_off(
    clock: FakeClock, registry: CollectorRegistry, name: str, metrics: bool
) -> None:
    queue: WorkQueue[str] = WorkQueue(name, clock=clock, metrics=metrics)
    queue.add("a")
    assert METRICS_REGISTRY.get_sample_value("workqueue_adds_total", {"name": name}) is None


async def test_the_shared_registry_serves_queue_and_process_metrics() -> None:
    queue: WorkQueue[str] = WorkQueue("test-shared-registry")
    queue.add("a")
    text = generate_latest(METRICS_REGISTRY).decode()
    assert (
        'workqueue_adds_total{controller="test-shared-registry",name="test-shared-registry"} 1.0'
        in text
    )
    assert "process_resident_memory_bytes" in text
    types = {line for line in text.splitlines() if line.startswith("# TYPE workqueue_")}
    assert types == {
        "# TYPE workqueue_depth gauge",
        "# TYPE workqueue_adds_total counter",
        "# TYPE workqueue_queue_duration_seconds histogram",
        "# TYPE workqueue_work_duration_seconds histogram",
        "# TYPE workqueue_unfinished_work_seconds gauge",
        "# TYPE workqueue_longest_running_processor_seconds gauge",
        "# TYPE workqueue_retries_total counter",
    }
