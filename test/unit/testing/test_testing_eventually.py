"""eventually: poll until a check passes, or fail with the check's last assertion."""

from __future__ import annotations

import pytest

from gpuctrl.testing import eventually


async def test_returns_the_result_once_the_check_passes():
    calls = []

    async def check() -> int:
        calls.append(None)
        assert len(calls) >= 3, "not yet"
        return len(calls)

    assert await eventually(check, interval=0) == 3


async def test_raises_the_last_assertion_after_the_deadline():
    async def check() -> None:
        raise AssertionError("never true")

    with pytest.raises(AssertionError, match="never true"):
        await eventually(check, within=0.05, interval=0.01)


async def test_other_errors_are_not_retried():
    calls = []

    async def check() -> None:
        calls.append(None)
        raise KeyError("boom")

    with pytest.raises(KeyError):
        await eventually(check)
    assert len(calls) == 1


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
async def test_a_check_returning_false_is_polled_until_true(is_async: bool):
    calls = []

    def sync_check() -> bool:
        calls.append(None)
        return len(calls) >= 3

    async def async_check() -> bool:
        return sync_check()

    assert await eventually(async_check if is_async else sync_check, interval=0) is True
    assert len(calls) == 3


async def test_a_check_that_stays_false_fails_naming_the_deadline():
    with pytest.raises(AssertionError, match=r"not true within 0\.05 s"):
        await eventually(lambda: False, within=0.05, interval=0.01)
