"""Fixtures for the gpuctrl.runtime unit tests."""

from collections.abc import Iterator

import pytest

from gpuctrl.testing import FakeClock


@pytest.fixture
def clock() -> Iterator[FakeClock]:
    """A hand-stepped fake clock starting at 0 (closed after the test)."""
    with FakeClock() as fake:
        yield fake
