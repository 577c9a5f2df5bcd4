"""Both install paths on a real kube-apiserver: server-side applied, least privilege proven by the
apiserver itself, and uninstalled without a trace.

Each test gets its own control plane (etcd, apiserver, controller-manager for namespace
deletion and garbage collection): the install's MutatingWebhookConfiguration (failurePolicy
Fail) must not reach the pods of other tests in the shared one.

The objects are applied as written (``policy/v1`` PodDisruptionBudgets, the webhook
configuration, the CRDs) by the control plane's own kubectl.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import yaml
from install_manifests import (
    CONFIG,
    CUSTOM,
    NAMESPACE,
    helm_crds,
    helm_render,
    install,
    kubectl,
    kustomize,
    stream,
    uninstall,
)

from controllers.render import render
from controllers.render._inputs import read_inputs
from gpuctrl.testing import ControlPlane

pytestmark = [pytest.mark.controlplane, pytest.mark.slow]

ROOT = Path(__file__).parents[3]
SAMPLES = sorted((CONFIG / "samples").glob("clusterpolicy-*.yaml"))
NODES = ROOT / "test" / "data" / "render" / "nodes.yaml"


@pytest_asyncio.fixture(loop_scope="session")
async def plane() -> AsyncIterator[ControlPlane]:
    async with ControlPlane(controller_manager=True) as control_plane:
        yield control_plane


async def leftovers(plane: ControlPlane) -> list[str]:
    """Every object the install labels part-of gpuctrl that is still there, and its namespace."""
    kinds = (
        "deployments,services,serviceaccounts,roles,rolebindings,poddisruptionbudgets,"
        "clusterroles,clusterrolebindings,mutatingwebhookconfigurations"
    )
    found = await kubectl(
        plane.kubeconfig,
        "get",
        kinds,
        "--all-namespaces",
        "-l",
        "app.kubernetes.io/part-of=gpuctrl",
        "-o",
        "name",
    )
    names = found.split()
    namespaces = await kubectl(plane.kubeconfig, "get", "namespaces", "-o", "name")
    return names + [n for n in namespaces.split() if n == f"namespace/{NAMESPACE}"]


async def can_i(plane: ControlPlane, account: str, *args: str) -> bool:
    answer = await kubectl(
        plane.kubeconfig,
        "auth",
        "can-i",
        f"--as=system:serviceaccount:{NAMESPACE}:{account}",
        *args,
        check=False,
    )
    return answer.strip().splitlines()[0] == "yes"


async def operand_rbac_as_manager(plane: ControlPlane) -> None:
    """The operand RBAC of every sample, applied AS the manager: the apiserver's escalation
    check admits a Role only when its creator holds every rule in it."""
    manager = await plane.service_account_kubeconfig(NAMESPACE, "gpuctrl-manager")
    for sample in SAMPLES:
        given = read_inputs([sample, NODES], NAMESPACE)
        accounts = [
            o
            for o in render(given.policy, given.facts)
            if o["kind"]
            in ("ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding")
        ]
        await kubectl(
            manager,
            "apply",
            "--server-side",
            "--field-manager=gpuctrl-test",
            "-f",
            "-",
            stdin=stream(accounts),
        )


async def check_privileges(plane: ControlPlane) -> None:
    # What each account must and must not do, as the apiserver's RBAC authorizer answers.
    allowed = [
        ("gpuctrl-manager", "patch", "nodes"),
        ("gpuctrl-manager", "patch", "clusterpolicies.gpuctrl.io", "--subresource=status"),
        ("gpuctrl-manager", "create", "daemonsets.apps", f"-n={NAMESPACE}"),
        ("gpuctrl-manager", "watch", "daemonsets.apps", f"-n={NAMESPACE}"),
        ("gpuctrl-manager", "list", "roles.rbac.authorization.k8s.io", "-n=default"),
        (
            "gpuctrl-manager",
            "update",
            "leases.coordination.k8s.io/gpuctrl-manager",
            f"-n={NAMESPACE}",
        ),
        ("gpuctrl-manager", "create", "events", "-n=default"),
        ("gpuctrl-webhook", "list", "podpolicies.gpuctrl.io"),
        ("gpuctrl-webhook", "update", "secrets/gpuctrl-webhook-tls", f"-n={NAMESPACE}"),
        ("gpuctrl-webhook", "patch", "mutatingwebhookconfigurations/gpuctrl-pod-policy"),
    ]
    denied = [
        ("gpuctrl-manager", "get", "secrets", f"-n={NAMESPACE}"),
        ("gpuctrl-manager", "update", "clusterpolicies.gpuctrl.io", "--subresource=status"),
        ("gpuctrl-manager", "list", "controllerrevisions.apps", f"-n={NAMESPACE}"),
        # Its objects are watched in its namespace (Roles also in default), nowhere else.
        ("gpuctrl-manager", "list", "daemonsets.apps", "-n=kube-system"),
        ("gpuctrl-manager", "list", "serviceaccounts", "-n=kube-system"),
        ("gpuctrl-manager", "list", "roles.rbac.authorization.k8s.io", "-n=kube-system"),
        ("gpuctrl-manager", "list", "serviceaccounts", "-n=default"),
        ("gpuctrl-manager", "create", "daemonsets.apps", "-n=default"),
        ("gpuctrl-manager", "update", "leases.coordination.k8s.io/other", f"-n={NAMESPACE}"),
        ("gpuctrl-manager", "delete", "nodes"),
        ("gpuctrl-manager", "create", "pods", "-n=kube-system"),
        ("gpuctrl-webhook", "get", "secrets/other", f"-n={NAMESPACE}"),
        ("gpuctrl-webhook", "patch", "mutatingwebhookconfigurations/istio-sidecar-injector"),
        ("gpuctrl-webhook", "update", "podpolicies.gpuctrl.io", "--subresource=status"),
        ("gpuctrl-webhook", "list", "pods", f"-n={NAMESPACE}"),
    ]
    for account, *question in allowed:
        assert await can_i(plane, account, *question), (account, question)
    for account, *question in denied:
        assert not await can_i(plane, account, *question), (account, question)


async def check_install(plane: ControlPlane, objects: list[dict[str, Any]]) -> None:
    await install(plane.kubeconfig, objects)
    # Applying again changes nothing: every object is stored as given.
    again = await kubectl(
        plane.kubeconfig,
        "apply",
        "--server-side",
        "--field-manager=gpuctrl-install",
        "--dry-run=server",
        "-o",
        "json",
        "-f",
        "-",
        stdin=stream([o for o in objects if o["kind"] not in CUSTOM]),
    )
    assert json.loads(again)["items"]
    await check_privileges(plane)
    await operand_rbac_as_manager(plane)
    await uninstall(plane.kubeconfig, objects)
    # The operands' RBAC the test applied as the manager is not the install's; remove it too.
    await kubectl(
        plane.kubeconfig,
        "delete",
        "clusterroles,clusterrolebindings",
        "-l",
        "app.kubernetes.io/managed-by=gpuctrl",
    )
    assert await leftovers(plane) == []


async def test_kustomize_install_applies_runs_least_privilege_and_uninstalls(
    plane: ControlPlane,
) -> None:
    await check_install(plane, kustomize(CONFIG / "default"))


async def test_helm_install_applies_runs_least_privilege_and_uninstalls(
    plane: ControlPlane,
) -> None:
    # What `helm install -n gpuctrl --create-namespace` sends: the namespace, crds/, templates.
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    namespace["metadata"]["labels"] = {"app.kubernetes.io/part-of": "gpuctrl"}
    values = yaml.safe_load((CONFIG / "samples" / "helm" / "values-servicemesh.yaml").read_text())
    await check_install(plane, [namespace, *helm_crds(), *helm_render(values)])
