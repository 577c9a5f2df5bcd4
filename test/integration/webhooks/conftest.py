"""Fixtures of the webhook's apiserver tests: the CRDs, a PodPolicy factory, cleanup."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest_asyncio
from kubernetes_asyncio.client import ApiClient

from gpuctrl.runtime import Client
from webhooks._configuration import CONFIGURATION_NAME, MUTATING_WEBHOOK_CONFIGURATIONS
from webhooks._handler import POD_POLICIES

MakePolicy = Callable[..., Awaitable[dict[str, Any]]]


@pytest_asyncio.fixture
async def pod_policy(crds: Any, kube_api: ApiClient) -> AsyncIterator[MakePolicy]:
    """Creates PodPolicies (cluster-scoped), deleted after the test with the webhook's
    configuration (its failurePolicy Fail must not outlive the webhook)."""
    client = Client(kube_api)
    made: list[str] = []

    async def make(**spec: Any) -> dict[str, Any]:
        name = f"policy-{secrets.token_hex(3)}"
        made.append(name)
        body = {
            "apiVersion": "gpuctrl.io/v1alpha1",
            "kind": "PodPolicy",
            "metadata": {"name": name},
            "spec": spec,
        }
        created: dict[str, Any] = await client.create(POD_POLICIES, body)
        return created

    yield make
    for name in made:
        await client.delete(POD_POLICIES, name)
    await client.delete(MUTATING_WEBHOOK_CONFIGURATIONS, CONFIGURATION_NAME)
