"""Unknown fields on a real kube-apiserver: refused with their path, not pruned.

``kubectl apply`` validates strictly by default (server-side field validation), as do
``--validate=strict``, server-side apply and an API request with ``fieldValidation=Strict``;
the CRDs' schemas declare every field a user types, so a misspelt one has nowhere to go.
"""

import asyncio
import json
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client
from kubernetes_asyncio.client import ApiClient
from kubernetes_asyncio.client.rest import ApiException

from gpuctrl.testing import ControlPlane, default_assets_dir


def _policy(kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "gpuctrl.io/v1alpha1",
        "kind": kind,
        "metadata": {"name": "strict-fields"},
        "spec": spec,
    }


TYPOS = [
    pytest.param(
        _policy("ClusterPolicy", {"driver": {"versoin": "550.127.05"}}),
        "spec.driver.versoin",
        id="cluster-policy",
    ),
    pytest.param(
        _policy("ClusterPolicy", {"driver": {"repoConfig": {"nodeLocalPath": ["/opt/x"]}}}),
        "spec.driver.repoConfig.nodeLocalPath",
        id="cluster-policy-nested",
    ),
    pytest.param(
        _policy("PodPolicy", {"targets": {"selector": {"matchExpressions": [{"kee": "a"}]}}}),
        "spec.targets.selector.matchExpressions[0].kee",
        id="pod-policy-selector",
    ),
]
VALID = [
    pytest.param(_policy("ClusterPolicy", {"driver": {"version": "550.127.05"}}), id="cluster"),
    pytest.param(
        _policy(
            "PodPolicy",
            {"targets": {"selector": {"matchExpressions": [{"key": "a", "operator": "Exists"}]}}},
        ),
        id="pod-policy",
    ),
]
APPLY = [
    pytest.param(("apply",), id="apply"),
    pytest.param(("apply", "--validate=strict"), id="validate-strict"),
    pytest.param(("apply", "--server-side", "--field-manager=test"), id="server-side"),
]


async def _kubectl(plane: ControlPlane, obj: dict[str, Any], *args: str) -> tuple[int, str]:
    """``kubectl ARGS --dry-run=server -f -`` of ``obj``: its exit status and output."""
    process = await asyncio.create_subprocess_exec(
        str(default_assets_dir() / "kubectl"),
        f"--kubeconfig={plane.kubeconfig}",
        *args,
        "--dry-run=server",
        "-f",
        "-",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await process.communicate(yaml.safe_dump(obj).encode())
    return process.returncode or 0, out.decode()


@pytest.mark.parametrize("args", APPLY)
@pytest.mark.parametrize(("obj", "field"), TYPOS)
async def test_kubectl_apply_refuses_an_unknown_field_by_its_path(
    crds: list[dict[str, Any]],
    control_plane: ControlPlane,
    args: tuple[str, ...],
    obj: dict[str, Any],
    field: str,
) -> None:
    code, out = await _kubectl(control_plane, obj, *args)
    assert code != 0, out
    assert field in out, out


@pytest.mark.parametrize("args", APPLY)
@pytest.mark.parametrize("obj", VALID)
async def test_kubectl_apply_accepts_a_valid_policy(
    crds: list[dict[str, Any]],
    control_plane: ControlPlane,
    args: tuple[str, ...],
    obj: dict[str, Any],
) -> None:
    code, out = await _kubectl(control_plane, obj, *args)
    assert code == 0, out
    assert "strict-fields" in out


async def _create(api: ApiClient, obj: dict[str, Any], validation: str | None) -> Any:
    plural = {"ClusterPolicy": "clusterpolicies", "PodPolicy": "podpolicies"}[obj["kind"]]
    options = {"field_validation": validation} if validation else {}
    return await client.CustomObjectsApi(api).create_cluster_custom_object(
        "gpuctrl.io", "v1alpha1", plural, obj, dry_run="All", **options
    )


@pytest.mark.parametrize(("obj", "field"), TYPOS)
async def test_strict_field_validation_refuses_an_unknown_field_by_its_path(
    crds: list[dict[str, Any]], kube_api: ApiClient, obj: dict[str, Any], field: str
) -> None:
    with pytest.raises(ApiException) as caught:
        await _create(kube_api, obj, "Strict")
    assert caught.value.status == 400, caught.value.body
    assert f'unknown field "{field}"' in json.loads(caught.value.body)["message"]


@pytest.mark.parametrize("obj", VALID)
async def test_strict_field_validation_accepts_a_valid_policy(
    crds: list[dict[str, Any]], kube_api: ApiClient, obj: dict[str, Any]
) -> None:
    stored = await _create(kube_api, obj, "Strict")
    assert stored["spec"]["targets" if obj["kind"] == "PodPolicy" else "driver"]


async def test_without_strict_validation_an_unknown_field_is_pruned(
    crds: list[dict[str, Any]], kube_api: ApiClient
) -> None:
    # What a client that asks for nothing gets (fieldValidation Warn): why kubectl's strict
    # default matters.
    stored = await _create(kube_api, _policy("ClusterPolicy", {"driver": {"versoin": "1"}}), None)
    assert "versoin" not in stored["spec"]["driver"]
