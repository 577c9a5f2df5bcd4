"""The generated CRDs on a real kube-apiserver: accepted, defaulting, and rejecting bad input."""

from pathlib import Path
from typing import Any

import pytest
import yaml
from api_apiserver_helpers import create
from kubernetes_asyncio import client
from kubernetes_asyncio.client import ApiClient
from kubernetes_asyncio.client.rest import ApiException

from api.v1alpha1 import ClusterPolicy, PodPolicy

SAMPLES = sorted((Path(__file__).parents[3] / "config" / "samples").glob("*.yaml"))


def _policy(spec: dict[str, Any], kind: str = "ClusterPolicy") -> dict[str, Any]:
    return {
        "apiVersion": "gpuctrl.io/v1alpha1",
        "kind": kind,
        "metadata": {"name": "p"},
        "spec": spec,
    }


async def test_crds_are_established(crds: list[dict[str, Any]], kube_api: ApiClient) -> None:
    extensions = client.ApiextensionsV1Api(kube_api)
    names = [crd["metadata"]["name"] for crd in crds]
    assert names == ["clusterpolicies.gpuctrl.io", "podpolicies.gpuctrl.io"]
    stored = await extensions.read_custom_resource_definition(names[0])
    assert stored.spec.versions[0].subresources.status is not None
    assert stored.spec.scope == "Cluster"


async def test_empty_spec_is_stored_with_the_models_defaults(
    crds: list[dict[str, Any]], kube_api: ApiClient
) -> None:
    stored = await create(kube_api, _policy({}))
    policy = ClusterPolicy.model_validate({k: v for k, v in stored.items() if k != "metadata"})
    assert policy.spec.driver.version == "550.127.05"
    assert stored["spec"]["driver"]["version"] == "550.127.05"  # defaulted by the apiserver
    assert stored["spec"]["daemonsets"]["rollingUpdate"]["maxUnavailable"] == 1
    assert stored["spec"]["validator"]["workloads"]["timeoutSeconds"] == 300


@pytest.mark.parametrize("sample", SAMPLES, ids=[s.stem for s in SAMPLES])
async def test_samples_are_accepted(
    crds: list[dict[str, Any]], kube_api: ApiClient, sample: Path
) -> None:
    for doc in yaml.safe_load_all(sample.read_text()):  # noqa: ASYNC240 - a small local file
        if doc["apiVersion"] != "gpuctrl.io/v1alpha1":
            continue
        stored = await create(kube_api, doc)
        model = ClusterPolicy if doc["kind"] == "ClusterPolicy" else PodPolicy
        model.model_validate({k: v for k, v in stored.items() if k != "metadata"})


REJECTED = [
    pytest.param(_policy({"daemonsets": {"updateStrategy": "Sometimes"}}), id="enum"),
    pytest.param(_policy({"driver": {"enabled": "yes"}}), id="type"),
    pytest.param(_policy({"validator": {"workloads": {"timeoutSeconds": 0}}}), id="minimum"),
    pytest.param(_policy({"driver": {"resources": {"limits": {"cpu": "lots"}}}}), id="quantity"),
    pytest.param(_policy({"daemonsets": {"rollingUpdate": {"maxUnavailable": "1"}}}), id="percent"),
    pytest.param(_policy({"daemonsets": {"rollingUpdate": {"maxUnavailable": 0}}}), id="zero"),
    pytest.param(_policy({"daemonsets": {"rollingUpdate": {"maxUnavailable": "0%"}}}), id="0%"),
    pytest.param(_policy({"toolkit": {"containerd": {"socketPath": "x.sock"}}}), id="pattern"),
    pytest.param(_policy({"toolkit": {"env": [{"value": "no name"}]}}), id="required"),
    pytest.param(_policy({"meshes": ["cilium"]}, "PodPolicy"), id="podpolicy-mesh"),
    pytest.param(
        _policy({"targets": {"components": ["everything"]}}, "PodPolicy"), id="podpolicy-target"
    ),
]


@pytest.mark.parametrize("obj", REJECTED)
async def test_schema_violations_are_rejected(
    crds: list[dict[str, Any]], kube_api: ApiClient, obj: dict[str, Any]
) -> None:
    with pytest.raises(ApiException) as caught:
        await create(kube_api, obj)
    assert caught.value.status == 422, caught.value.body


async def _apply_status(custom: client.CustomObjectsApi, name: str, status: dict[str, Any]) -> Any:
    body = {**_policy({}), "metadata": {"name": name}, "status": status}
    return await custom.api_client.call_api(
        f"/apis/gpuctrl.io/v1alpha1/clusterpolicies/{name}/status",
        "PATCH",
        query_params=[("fieldManager", "test"), ("force", "true")],
        header_params={"Content-Type": "application/apply-patch+yaml"},
        body=body,
        auth_settings=["BearerToken"],
        response_types_map={200: "object"},
    )


async def test_status_subresource_takes_conditions_and_checks_state(
    crds: list[dict[str, Any]], kube_api: ApiClient
) -> None:
    # kube-apiserver 1.20 records status.conditions as one atomic field for server-side apply
    # on /status (kubernetes#88901), although the CRD declares a map keyed by type; so this
    # checks the schema, not per-manager ownership.
    custom = client.CustomObjectsApi(kube_api)
    name = "status-test"
    await create(kube_api, {**_policy({}), "metadata": {"name": name}}, dry_run=False)
    try:
        condition = {
            "type": "DriverReady",
            "status": "False",
            "reason": "OperandNotReady",
            "message": "1 of 2 pods ready",
            "observedGeneration": 1,
            "lastTransitionTime": "2026-01-02T03:04:05Z",
        }
        await _apply_status(custom, name, {"state": "notReady", "conditions": [condition]})
        stored = await custom.get_cluster_custom_object_status(
            "gpuctrl.io", "v1alpha1", "clusterpolicies", name
        )
        policy = ClusterPolicy.model_validate({k: v for k, v in stored.items() if k != "metadata"})
        assert policy.status is not None
        assert policy.status.conditions[0].reason == "OperandNotReady"
        with pytest.raises(ApiException) as caught:
            await _apply_status(custom, name, {"state": "broken"})
        assert caught.value.status == 422
    finally:
        await custom.delete_cluster_custom_object("gpuctrl.io", "v1alpha1", "clusterpolicies", name)
