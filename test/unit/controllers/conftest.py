"""Fixtures for the reconcilers' unit tests: a cache nothing starts, the controllers'
informers on it synced empty, and recording writers (see `reconcile_kit`)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from kubernetes_asyncio.client import ApiClient, Configuration
from reconcile_kit import HandFilledCache, StatusRecord, Writes

from controllers._reads import TRANSFORMS
from gpuctrl.runtime import Cache, Client


@pytest.fixture
async def cache() -> AsyncIterator[Cache]:
    """A cache on a client that is never called (nothing is started)."""
    async with ApiClient(Configuration()) as api:
        yield Cache(Client(api), transforms=TRANSFORMS)


@pytest.fixture
def cluster(cache: Cache) -> HandFilledCache:
    """The controllers' informers on ``cache``, synced and empty."""
    return HandFilledCache(cache)


@pytest.fixture
def writes() -> Writes:
    return Writes()


@pytest.fixture
def status() -> StatusRecord:
    return StatusRecord()
