"""client-go's event correlation: de-duplication, aggregation, spam filter (virtual time)."""

from typing import Any

from gpuctrl.runtime._events import EventCorrelator
from gpuctrl.testing import FakeClock


def event(message: str = "it broke", name: str = "pod-a", reason: str = "Broken") -> dict[str, Any]:
    return {
        "metadata": {"name": f"{name}.{message}", "namespace": "ns"},
        "involvedObject": {"kind": "Pod", "namespace": "ns", "name": name, "uid": name},
        "source": {"component": "test", "host": "h"},
        "type": "Warning",
        "reason": reason,
        "message": message,
        "count": 1,
        "firstTimestamp": "t0",
        "lastTimestamp": "t0",
    }


def test_repeats_bump_the_count_of_the_event_written(clock: FakeClock) -> None:
    correlator = EventCorrelator(clock)
    first = correlator.correlate(event())
    assert first is not None
    assert first.create
    again = correlator.correlate(event())
    assert again is not None
    assert not again.create
    assert again.body["count"] == 2
    assert again.body["metadata"]["name"] == first.body["metadata"]["name"]


def test_similar_events_are_combined_after_ten(clock: FakeClock) -> None:
    correlator = EventCorrelator(clock)
    sends = [correlator.correlate(event(f"message {i}")) for i in range(13)]
    assert all(s is not None for s in sends)
    assert [s.create for s in sends if s] == [True] * 11 + [False] * 2
    combined = sends[10]
    assert combined is not None
    assert combined.body["message"] == "(combined from similar events): message 10"
    assert sends[12] is not None
    assert sends[12].body["count"] == 3


def test_the_spam_filter_drops_a_flood_and_refills_slowly(clock: FakeClock) -> None:
    correlator = EventCorrelator(clock)
    sent = [correlator.correlate(event()) for _ in range(100)]
    assert sum(s is not None for s in sent) == 25
    clock.advance(299)
    assert correlator.correlate(event()) is None
    clock.advance(1)
    assert correlator.correlate(event()) is not None
    other = correlator.correlate(event(name="pod-b"))  # another object has its own bucket
    assert other is not None
