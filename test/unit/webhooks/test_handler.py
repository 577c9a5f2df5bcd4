"""The handler shell: which requests `mutate` sees, and PodPolicies kept from informer events."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gpuctrl.runtime import freeze
from gpuctrl.runtime.webhook import AdmissionRequest
from webhooks import PodPolicyHandler, PolicySet
from webhooks._mutate import MAX_CONTAINERS

POD = {
    "metadata": {"labels": {"app.kubernetes.io/component": "validator-workloads"}},
    "spec": {"containers": [{"name": "c"}]},
}


def request(**fields: Any) -> AdmissionRequest:
    values: dict[str, Any] = {
        "uid": "u",
        "kind": ("", "v1", "Pod"),
        "resource": ("", "v1", "pods"),
        "sub_resource": "",
        "name": "",
        "namespace": "gpuctrl",
        "operation": "CREATE",
        "dry_run": False,
        "object": POD,
        "raw": {},
        **fields,
    }
    return AdmissionRequest(**values)


def policy_object(name: str, **spec: Any) -> Any:
    return freeze(
        {
            "apiVersion": "gpuctrl.io/v1alpha1",
            "kind": "PodPolicy",
            "metadata": {"name": name, "resourceVersion": "1"},
            "spec": spec,
        }
    )


@pytest.fixture
def handler() -> PodPolicyHandler:
    policies = PolicySet()
    policies.on_add(policy_object("istio", meshes=["istio"]))
    return PodPolicyHandler(policies, "gpuctrl")


@pytest.mark.parametrize(
    "fields",
    [
        pytest.param({"kind": ("apps", "v1", "Deployment")}, id="other-kind"),
        pytest.param({"resource": ("", "v1", "configmaps")}, id="other-resource"),
        pytest.param({"sub_resource": "status"}, id="subresource"),
        pytest.param({"operation": "UPDATE"}, id="update"),
        pytest.param({"namespace": "default"}, id="other-namespace"),
    ],
)
async def test_anything_but_a_pod_created_in_the_operands_namespace_is_left_alone(
    handler: PodPolicyHandler, fields: dict[str, Any]
) -> None:
    answer = await handler(request(**fields))
    assert answer.allowed
    assert list(answer.patch) == []


async def test_a_pod_gets_the_patch_and_a_dry_run_too(handler: PodPolicyHandler) -> None:
    for dry_run in (False, True):
        answer = await handler(request(dry_run=dry_run))
        assert answer.allowed
        assert [op["path"] for op in answer.patch] == ["/metadata/labels/sidecar.istio.io~1inject"]


async def test_a_misshapen_pod_is_denied_naming_where(handler: PodPolicyHandler) -> None:
    answer = await handler(request(object={"spec": {"containers": "x"}}))
    assert not answer.allowed
    assert answer.code == 400
    assert "spec.containers must be a list" in answer.message


def test_an_invalid_policy_is_left_out_and_a_fixed_one_comes_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    policies = PolicySet()
    good = policy_object("p", labels={"a": "b"})
    policies.on_add(good)
    bad = policy_object("p", labels={"a": "not a valid value!"})
    policies.on_update(good, bad)
    assert policies.policies == {}
    assert "PodPolicy p is invalid" in caplog.text
    policies.on_update(bad, good)
    assert set(policies.policies) == {"p"}
    policies.on_delete(good)
    assert policies.policies == {}


@pytest.mark.parametrize(
    ("count", "allowed"), [(MAX_CONTAINERS, True), (MAX_CONTAINERS + 1, False)]
)
async def test_a_pod_with_too_many_containers_is_denied_naming_the_bound(
    handler: PodPolicyHandler, count: int, allowed: bool
) -> None:
    containers = [{"name": f"c{i}"} for i in range(count)]
    pod = {**POD, "spec": {"initContainers": containers[:1], "containers": containers[1:]}}
    answer = await handler(request(object=pod))
    assert answer.allowed is allowed
    if not allowed:
        assert answer.code == 400
        assert f"the pod has {count} containers and init containers" in answer.message
        assert f"at most {MAX_CONTAINERS}" in answer.message


async def test_the_event_loop_runs_while_a_pod_is_mutated(handler: PodPolicyHandler) -> None:
    """`mutate` runs in a worker thread: the loop turns at least once before the answer
    (run on the loop, the review would be answered before any other task ran)."""
    answering = asyncio.create_task(handler(request()))
    turns = 0

    async def turn() -> None:
        nonlocal turns
        while not answering.done():
            turns += 1
            await asyncio.sleep(0)

    await asyncio.gather(answering, asyncio.create_task(turn()))
    assert turns >= 1
    assert (await answering).allowed
