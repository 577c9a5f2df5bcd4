"""Rate limiters (gpuctrl.runtime._ratelimiter)."""

import pytest

from gpuctrl.runtime import (
    BucketRateLimiter,
    ItemExponentialFailureRateLimiter,
    MaxOfRateLimiter,
    RateLimiter,
    default_controller_rate_limiter,
)
from gpuctrl.testing import FakeClock

# (operation, argument, expected): "when" key -> delay; "forget" key; "requeues" key -> count;
# "advance" seconds (on the fake clock).
Step = tuple[str, object, object]


def run(limiter: RateLimiter, clock: FakeClock, steps: list[Step]) -> None:
    for number, (op, arg, expected) in enumerate(steps):
        where = f"step {number}: {op}({arg!r}) at t={clock.now()}"
        if op == "when":
            assert limiter.when(arg) == pytest.approx(expected), where
        elif op == "requeues":
            assert limiter.num_requeues(arg) == expected, where
        elif op == "forget":
            limiter.forget(arg)
        elif op == "advance":
            assert isinstance(arg, float)
            clock.advance(arg)
        else:
            raise AssertionError(f"unknown op {op!r}")


def whens(key: str, *delays: float) -> list[Step]:
    return [("when", key, delay) for delay in delays]


EXPONENTIAL: dict[str, tuple[ItemExponentialFailureRateLimiter, list[Step]]] = {
    "5 ms doubling": (
        ItemExponentialFailureRateLimiter(),
        [*whens("a", 0.005, 0.010, 0.020, 0.040, 0.080, 0.160), ("requeues", "a", 6)],
    ),
    "capped": (
        ItemExponentialFailureRateLimiter(1.0, 5.0),
        [*whens("a", 1.0, 2.0, 4.0, 5.0, 5.0)],
    ),
    "1000 s cap by default": (
        ItemExponentialFailureRateLimiter(),
        [*whens("a", *[0.005 * 2**n for n in range(18)]), *whens("a", 1000.0, 1000.0)],
    ),
    "keys back off independently": (
        ItemExponentialFailureRateLimiter(),
        [*whens("a", 0.005, 0.010), *whens("b", 0.005), ("requeues", "a", 2),
         ("requeues", "b", 1), ("requeues", "c", 0)],
    ),
    "forget starts a key again": (
        ItemExponentialFailureRateLimiter(),
        [*whens("a", 0.005, 0.010), *whens("b", 0.005), ("forget", "a", None),
         ("requeues", "a", 0), *whens("a", 0.005), *whens("b", 0.010)],
    ),
    "time does not reset a key": (
        ItemExponentialFailureRateLimiter(),
        [*whens("a", 0.005), ("advance", 3600.0, None), *whens("a", 0.010)],
    ),
}  # fmt: skip


@pytest.mark.parametrize(("limiter", "steps"), EXPONENTIAL.values(), ids=EXPONENTIAL.keys())
def test_item_exponential_failure(
    clock: FakeClock, limiter: ItemExponentialFailureRateLimiter, steps: list[Step]
) -> None:
    run(limiter, clock, steps)


def test_item_exponential_failure_never_overflows() -> None:
    limiter = ItemExponentialFailureRateLimiter(0.005, 1000.0)
    for _ in range(5000):
        delay = limiter.when("a")
    assert delay == 1000.0
    assert limiter.num_requeues("a") == 5000


BUCKET: dict[str, tuple[tuple[float, int], list[Step]]] = {
    "burst, then paced at qps": (
        (10.0, 3),
        [*whens("a", 0.0, 0.0, 0.0, 0.1, 0.2, 0.3)],
    ),
    "the bucket is shared by all keys": (
        (10.0, 2),
        [*whens("a", 0.0), *whens("b", 0.0), *whens("c", 0.1), *whens("a", 0.2)],
    ),
    "tokens refill with time, up to the burst": (
        (10.0, 3),
        [*whens("a", 0.0, 0.0, 0.0, 0.1), ("advance", 60.0, None),
         *whens("a", 0.0, 0.0, 0.0, 0.1)],
    ),
    "a reservation ahead of time is paid back first": (
        (10.0, 1),
        [*whens("a", 0.0, 0.1, 0.2), ("advance", 0.1, None), *whens("a", 0.2)],
    ),
    "forget and requeues keep no history": (
        (1.0, 1),
        [*whens("a", 0.0, 1.0), ("forget", "a", None), *whens("a", 2.0), ("requeues", "a", 0)],
    ),
}  # fmt: skip


@pytest.mark.parametrize(("args", "steps"), BUCKET.values(), ids=BUCKET.keys())
def test_bucket(clock: FakeClock, args: tuple[float, int], steps: list[Step]) -> None:
    run(BucketRateLimiter(*args, clock=clock), clock, steps)


def test_bucket_default_is_burst_100_then_10_per_second(clock: FakeClock) -> None:
    limiter = BucketRateLimiter(clock=clock)
    assert [limiter.when(n) for n in range(100)] == [0.0] * 100
    assert [limiter.when(n) for n in range(3)] == pytest.approx([0.1, 0.2, 0.3])


def test_max_of_takes_the_longest_delay_and_counts_in_every_limiter(clock: FakeClock) -> None:
    fast = ItemExponentialFailureRateLimiter(0.001, 1000.0)
    slow = ItemExponentialFailureRateLimiter(0.010, 0.020)
    limiter = MaxOfRateLimiter(fast, slow)
    run(limiter, clock, [*whens("a", 0.010, 0.020, 0.020, 0.020, 0.020, 0.032, 0.064)])
    assert (fast.num_requeues("a"), slow.num_requeues("a")) == (7, 7)
    run(limiter, clock, [("requeues", "a", 7), ("forget", "a", None), ("requeues", "a", 0)])
    assert (fast.num_requeues("a"), slow.num_requeues("a")) == (0, 0)


def test_default_controller_rate_limiter(clock: FakeClock) -> None:
    """Per-key 5 ms doubling, until the shared burst of 100 is spent: then 10 per second."""
    limiter = default_controller_rate_limiter(clock)
    run(limiter, clock, whens("a", 0.005, 0.010, 0.020))
    for key in range(97):
        assert limiter.when(key) == 0.005
    run(limiter, clock, [*whens("b", 0.1), *whens("a", 0.2), ("requeues", "a", 4)])
    clock.advance(3600.0)
    run(limiter, clock, [*whens("a", 0.080), ("forget", "a", None), *whens("a", 0.005)])


@pytest.mark.parametrize(
    ("make", "message"),
    [
        pytest.param(lambda: ItemExponentialFailureRateLimiter(0.0, 1.0), "0 < base", id="base 0"),
        pytest.param(lambda: ItemExponentialFailureRateLimiter(2.0, 1.0), "base <= cap", id="cap"),
        pytest.param(lambda: BucketRateLimiter(0.0, 10), "qps > 0", id="qps 0"),
        pytest.param(lambda: BucketRateLimiter(10.0, 0), "burst >= 1", id="burst 0"),
        pytest.param(MaxOfRateLimiter, "at least one", id="no limiters"),
    ],
)
def test_bad_arguments_are_refused(make: object, message: str) -> None:
    assert callable(make)
    with pytest.raises(ValueError, match=message):
        make()
