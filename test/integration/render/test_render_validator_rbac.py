"""The rendered validator RBAC is enough for ``gpuctrl validate cuda``, and is needed.

The minimal sample is rendered with the test's namespace as the operator namespace; its
validator ServiceAccount, Roles, RoleBindings and workload-template ConfigMap are created in the
local control plane, and the cuda init container's own command line (its ``$(VAR)`` filled as
the kubelet would) runs as that ServiceAccount against a simulated GPU node.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from kubernetes_asyncio import client, utils
from kubernetes_asyncio.client import ApiClient
from kubernetes_asyncio.client.exceptions import ApiException

from controllers.render import builtin_workload_templates, render
from controllers.render._inputs import read_inputs
from gpuctrl.cli import main
from gpuctrl.testing import ControlPlane, SimulatedKubelet
from gpuctrl.validator import status_path

ROOT = Path(__file__).parents[3]
SAMPLE = ROOT / "config" / "samples" / "clusterpolicy-minimal.yaml"
NODES = ROOT / "test" / "data" / "render" / "nodes.yaml"
ACCOUNT = "gpuctrl-validator"
_APPLIED = {"ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"}


def _validator_objects(namespace: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The validator's account objects and workload ConfigMap, and its cuda init container."""
    given = read_inputs([SAMPLE, NODES], namespace)
    objects = render(given.policy, given.facts)
    validator = [o for o in objects if o["metadata"]["labels"].get(
        "app.kubernetes.io/component") == "validator"]  # fmt: skip
    applied = [
        o
        for o in validator
        if o["kind"] in _APPLIED
        or (o["kind"] == "ConfigMap" and o["data"] == builtin_workload_templates())
    ]
    [daemonset] = [o for o in validator if o["kind"] == "DaemonSet"]
    [cuda] = [
        c
        for c in daemonset["spec"]["template"]["spec"]["initContainers"]
        if c["name"] == "cuda-validation"
    ]
    return applied, cuda


def _command_line(container: dict[str, Any], env: dict[str, str]) -> list[str]:
    """The container's args with ``$(VAR)`` replaced from its literal env and ``env``."""
    values = {v["name"]: v["value"] for v in container["env"] if "value" in v} | env
    return [re.sub(r"\$\(([A-Za-z_0-9]+)\)", lambda m: values[m[1]], a) for a in container["args"]]


@pytest_asyncio.fixture(loop_scope="session")
async def runtime_class(kube_api: ApiClient) -> AsyncIterator[None]:
    """RuntimeClass ``nvidia`` (workload pods name it), deleted after unless it existed."""
    node = client.NodeV1Api(kube_api)
    try:
        await node.create_runtime_class({"metadata": {"name": "nvidia"}, "handler": "nvidia"})
    except ApiException as error:
        if error.status != 409:
            raise
        yield
        return
    yield
    await node.delete_runtime_class("nvidia")


@pytest_asyncio.fixture(loop_scope="session")
async def rendered_validator(
    kube_api: ApiClient, namespace: str, runtime_class: None
) -> AsyncIterator[dict[str, Any]]:
    """The rendered validator objects created in the cluster; yields the cuda init container.

    Objects outside the test's namespace (the Role for Events in ``default``) are deleted after.
    """
    applied, cuda = _validator_objects(namespace)
    for obj in applied:
        await utils.create_from_dict(kube_api, obj)
    yield cuda
    rbac = client.RbacAuthorizationV1Api(kube_api)
    for obj in applied:
        where = obj["metadata"].get("namespace")
        if where == namespace:
            continue
        assert (obj["kind"], where) in {("Role", "default"), ("RoleBinding", "default")}
        delete = rbac.delete_namespaced_role if obj["kind"] == "Role" else (
            rbac.delete_namespaced_role_binding)  # fmt: skip
        await delete(obj["metadata"]["name"], where)


async def _validate_cuda(
    control_plane: ControlPlane,
    namespace: str,
    node: str,
    cuda: dict[str, Any],
    account: str,
    output: Path,
) -> int:
    kubeconfig = await control_plane.service_account_kubeconfig(namespace, account)
    argv = _command_line(cuda, {"NODE_NAME": node, "NAMESPACE": namespace})
    extra = ["--kubeconfig", str(kubeconfig), "--output-dir", str(output), "--timeout", "30"]
    return await asyncio.to_thread(main, [*argv, *extra])


@pytest.mark.gpu_nodes(count=1)
async def test_rendered_validator_rbac_lets_the_cuda_check_pass(
    control_plane: ControlPlane,
    kube_api: ApiClient,
    namespace: str,
    gpu_nodes: SimulatedKubelet,
    rendered_validator: dict[str, Any],
    tmp_path: Path,
) -> None:
    node = gpu_nodes.nodes[0].name

    code = await _validate_cuda(
        control_plane, namespace, node, rendered_validator, ACCOUNT, tmp_path
    )

    assert code == 0
    assert status_path(tmp_path, "cuda").exists()
    events = await client.CoreV1Api(kube_api).list_namespaced_event(
        "default", field_selector=f"involvedObject.name={node}"
    )  # recorded only if the Role in "default" lets the agent create Events
    assert [(e.reason, e.message) for e in events.items] == [
        ("ValidationPassed", "cuda validation passed")
    ]


@pytest.mark.gpu_nodes(count=1)
async def test_an_account_without_the_rendered_rbac_is_refused(
    control_plane: ControlPlane,
    namespace: str,
    gpu_nodes: SimulatedKubelet,
    rendered_validator: dict[str, Any],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    node = gpu_nodes.nodes[0].name

    code = await _validate_cuda(
        control_plane, namespace, node, rendered_validator, "default", tmp_path
    )

    assert code == 1
    assert "the API refused: 403 Forbidden" in capsys.readouterr().err
    assert not status_path(tmp_path, "cuda").exists()
