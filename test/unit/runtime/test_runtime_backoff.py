"""Reconnect backoff: 0.8 s doubling to 30 s, jittered into [75 %, 100 %]."""

import pytest

from gpuctrl.runtime._backoff import Backoff, backoff_delay


@pytest.mark.parametrize(
    ("failures", "u", "delay"),
    [
        (1, 1.0, 0.8),
        (2, 1.0, 1.6),
        (3, 1.0, 3.2),
        (6, 1.0, 25.6),
        (7, 1.0, 30.0),
        (500, 1.0, 30.0),
        (1, 0.0, 0.6),
        (7, 0.0, 22.5),
    ],
    ids=[
        "first",
        "second",
        "third",
        "sixth",
        "capped",
        "huge",
        "first-min-jitter",
        "capped-min-jitter",
    ],
)
def test_backoff_delay(failures: int, u: float, delay: float) -> None:
    assert backoff_delay(failures, u, initial=0.8, cap=30.0) == pytest.approx(delay)


def test_backoff_grows_and_resets() -> None:
    backoff = Backoff()
    delays = [backoff.next_delay() for _ in range(8)]
    assert all(0.75 * 0.8 <= d <= 30 for d in delays)
    assert delays[5] > delays[0]
    backoff.reset()
    assert backoff.next_delay() <= 0.8
