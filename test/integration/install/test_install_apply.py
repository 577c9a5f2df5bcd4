"""Both install paths on a real kube-apiserver: server-side applied, least privilege proven by the
apiserver itself, and uninstalled without a trace.

Each test gets its own control plane (etcd, apiserver, controller-manager for namespace
deletion and garbage collection, admission plugin OwnerReferencesPermissionEnforcement as
OpenShift enables it): the install's MutatingWebhookConfiguration (failurePolicy Fail) must not
reach the pods of other tests in the shared one.

The objects are applied as written (``policy/v1`` PodDisruptionBudgets, the webhook
configuration, the CRDs) by the control plane's own kubectl.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import yaml
from install_manifests import (
    CONFIG,
    CUSTOM,
    NAMESPACE,
    documents,
    helm_crds,
    helm_render,
    install,
    kubectl,
    kustomize,
    stream,
    uninstall,
)

from controllers._kinds import CLUSTER_POLICIES, CLUSTER_ROLE_BINDINGS, CLUSTER_ROLES, OWNED
from controllers.render import render
from controllers.render._inputs import read_inputs
from gpuctrl.runtime import Client, Forbidden, new_api_client, set_controller_reference
from gpuctrl.testing import ControlPlane

pytestmark = pytest.mark.slow

ROOT = Path(__file__).parents[3]
SAMPLES = sorted((CONFIG / "samples").glob("clusterpolicy-*.yaml"))
NODES = ROOT / "test" / "data" / "render" / "nodes.yaml"


@pytest_asyncio.fixture(loop_scope="session")
async def plane() -> AsyncIterator[ControlPlane]:
    plugins = ["OwnerReferencesPermissionEnforcement"]
    async with ControlPlane(controller_manager=True, admission_plugins=plugins) as control_plane:
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


async def operands_as_manager(plane: ControlPlane) -> None:
    """Every sample's operand objects, its ClusterPolicy their controller owner, applied (created,
    then patched by the next sample) and pruned AS the manager, with its own calls: the
    escalation check admits a Role only when its creator holds every rule in it,
    OwnerReferencesPermissionEnforcement a blockOwnerDeletion reference only from who may update
    the owner's finalizers, and RBAC writes are allowed only on the names the manager renders."""
    manager = await plane.service_account_kubeconfig(NAMESPACE, "gpuctrl-manager")
    applied: dict[tuple[str, str, str], dict[str, Any]] = {}
    async with (
        await new_api_client(plane.kubeconfig) as admin_api,
        await new_api_client(manager) as manager_api,
    ):
        admin, client = Client(admin_api), Client(manager_api)
        for sample in SAMPLES:
            [policy] = [o for o in documents(sample) if o["kind"] == "ClusterPolicy"]
            owner = await admin.apply(
                CLUSTER_POLICIES, policy, field_manager="gpuctrl-test", force=True
            )
            given = read_inputs([sample, NODES], NAMESPACE)
            for obj in render(given.policy, given.facts):
                resource = OWNED[(obj["apiVersion"], obj["kind"])]
                owned = set_controller_reference(owner, obj)
                await client.apply(resource, owned, field_manager="gpuctrl-test", force=True)
                meta = obj["metadata"]
                applied[(obj["kind"], meta.get("namespace", ""), meta["name"])] = obj
        for obj in applied.values():
            meta = obj["metadata"]
            resource = OWNED[(obj["apiVersion"], obj["kind"])]
            await client.delete(resource, meta["name"], meta.get("namespace"), missing_ok=False)


async def foreign_rbac_out_of_reach(plane: ControlPlane) -> None:
    """As the manager, RBAC it does not render can be neither rewritten nor deleted, even when
    the escalation check would pass (rules it holds; only finalizers or owner references
    changed, which could get cluster-admin garbage-collected)."""
    manager = await plane.service_account_kubeconfig(NAMESPACE, "gpuctrl-manager")
    rules = [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}]
    group = "rbac.authorization.k8s.io"
    role = {"apiVersion": f"{group}/v1", "kind": "ClusterRole", "metadata": {"name": "foreign"}}
    binding = {
        "apiVersion": f"{group}/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "foreign"},
        "roleRef": {"apiGroup": group, "kind": "ClusterRole", "name": "foreign"},
        "subjects": [{"apiGroup": group, "kind": "User", "name": "someone"}],
    }
    finalizer = {"metadata": {"finalizers": ["example.com/keep"]}}
    async with (
        await new_api_client(plane.kubeconfig) as admin_api,
        await new_api_client(manager) as manager_api,
    ):
        admin, client = Client(admin_api), Client(manager_api)
        foreign = await admin.create(CLUSTER_ROLES, {**role, "rules": rules})
        await admin.create(CLUSTER_ROLE_BINDINGS, binding)
        cluster_admin = await admin.get(CLUSTER_ROLES, "cluster-admin")
        cluster_admin["metadata"] |= finalizer["metadata"]
        attempts: dict[str, Callable[[], Awaitable[Any]]] = {
            "update a foreign ClusterRole": lambda: client.replace(
                CLUSTER_ROLES, {**foreign, "rules": rules * 2}
            ),
            "patch a foreign ClusterRole": lambda: client.merge_patch(
                CLUSTER_ROLES, "foreign", finalizer
            ),
            "delete a foreign ClusterRole": lambda: client.delete(CLUSTER_ROLES, "foreign"),
            "delete a foreign binding": lambda: client.delete(CLUSTER_ROLE_BINDINGS, "foreign"),
            "update cluster-admin": lambda: client.replace(CLUSTER_ROLES, cluster_admin),
            "patch cluster-admin": lambda: client.merge_patch(
                CLUSTER_ROLES, "cluster-admin", finalizer
            ),
            "delete cluster-admin's binding": lambda: client.delete(
                CLUSTER_ROLE_BINDINGS, "cluster-admin"
            ),
        }
        for what, attempt in attempts.items():
            try:
                await attempt()
            except Forbidden:
                continue
            pytest.fail(f"the manager may {what}")


SERVICE_MONITOR_CRD = Path(__file__).parents[2] / "data" / "prometheus" / "servicemonitors-crd.yaml"


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
        # The driver upgrade: its DaemonSets' revisions, every budget, evictions anywhere.
        ("gpuctrl-manager", "watch", "controllerrevisions.apps", f"-n={NAMESPACE}"),
        ("gpuctrl-manager", "watch", "poddisruptionbudgets.policy", "--all-namespaces"),
        ("gpuctrl-manager", "create", "pods", "--subresource=eviction", "-n=ml"),
        # Operand RBAC: created (no name to check), patched and pruned by name.
        ("gpuctrl-manager", "create", "clusterroles.rbac.authorization.k8s.io"),
        ("gpuctrl-manager", "patch", "clusterroles.rbac.authorization.k8s.io/gpuctrl-driver"),
        (
            "gpuctrl-manager",
            "delete",
            "clusterrolebindings.rbac.authorization.k8s.io/gpuctrl-device-plugin",
        ),
        (
            "gpuctrl-manager",
            "patch",
            "roles.rbac.authorization.k8s.io/gpuctrl-validator",
            "-n=default",
        ),
        ("gpuctrl-manager", "update", "clusterpolicies.gpuctrl.io", "--subresource=finalizers"),
        # The DCGM exporter's ServiceMonitor: its CRD watched by name, the objects in its namespace.
        (
            "gpuctrl-manager",
            "watch",
            "customresourcedefinitions.apiextensions.k8s.io/servicemonitors.monitoring.coreos.com",
        ),
        ("gpuctrl-manager", "create", "servicemonitors.monitoring.coreos.com", f"-n={NAMESPACE}"),
        ("gpuctrl-manager", "create", "services", f"-n={NAMESPACE}"),
        ("gpuctrl-webhook", "list", "podpolicies.gpuctrl.io"),
        ("gpuctrl-webhook", "get", "secrets/gpuctrl-webhook-tls", f"-n={NAMESPACE}"),
        ("gpuctrl-webhook", "update", "secrets/gpuctrl-webhook-tls", f"-n={NAMESPACE}"),
        ("gpuctrl-webhook", "patch", "mutatingwebhookconfigurations/gpuctrl-pod-policy"),
    ]
    denied = [
        ("gpuctrl-manager", "get", "secrets", f"-n={NAMESPACE}"),
        ("gpuctrl-manager", "update", "clusterpolicies.gpuctrl.io", "--subresource=status"),
        # The driver upgrade's reads: revisions of its DaemonSets, budgets it must honour.
        ("gpuctrl-manager", "list", "controllerrevisions.apps", "-n=kube-system"),
        ("gpuctrl-manager", "patch", "poddisruptionbudgets.policy", "-n=default"),
        ("gpuctrl-manager", "delete", "pods", "-n=kube-system"),
        # Its objects are watched in its namespace (Roles also in default), nowhere else.
        ("gpuctrl-manager", "list", "daemonsets.apps", "-n=kube-system"),
        ("gpuctrl-manager", "list", "serviceaccounts", "-n=kube-system"),
        ("gpuctrl-manager", "list", "roles.rbac.authorization.k8s.io", "-n=kube-system"),
        ("gpuctrl-manager", "list", "serviceaccounts", "-n=default"),
        ("gpuctrl-manager", "create", "daemonsets.apps", "-n=default"),
        ("gpuctrl-manager", "update", "leases.coordination.k8s.io/other", f"-n={NAMESPACE}"),
        ("gpuctrl-manager", "delete", "nodes"),
        ("gpuctrl-manager", "create", "pods", "-n=kube-system"),
        # No other CRD, no CRD written; no ServiceMonitor or Service elsewhere.
        ("gpuctrl-manager", "list", "customresourcedefinitions.apiextensions.k8s.io"),
        (
            "gpuctrl-manager",
            "get",
            "customresourcedefinitions.apiextensions.k8s.io/clusterpolicies.gpuctrl.io",
        ),
        (
            "gpuctrl-manager",
            "patch",
            "customresourcedefinitions.apiextensions.k8s.io/servicemonitors.monitoring.coreos.com",
        ),
        ("gpuctrl-manager", "create", "servicemonitors.monitoring.coreos.com", "-n=default"),
        ("gpuctrl-manager", "list", "services", "-n=kube-system"),
        # No RBAC it does not render: not cluster-admin, not its own or the webhook's.
        ("gpuctrl-manager", "update", "clusterroles.rbac.authorization.k8s.io/cluster-admin"),
        ("gpuctrl-manager", "patch", "clusterroles.rbac.authorization.k8s.io/cluster-admin"),
        ("gpuctrl-manager", "delete", "clusterrolebindings.rbac.authorization.k8s.io/foreign"),
        ("gpuctrl-manager", "patch", "clusterroles.rbac.authorization.k8s.io/gpuctrl-manager"),
        (
            "gpuctrl-manager",
            "patch",
            "roles.rbac.authorization.k8s.io/gpuctrl-webhook",
            f"-n={NAMESPACE}",
        ),
        ("gpuctrl-manager", "delete", "rolebindings.rbac.authorization.k8s.io/other", "-n=default"),
        ("gpuctrl-webhook", "get", "secrets/other", f"-n={NAMESPACE}"),
        # Issue 25 item 6: no Secret of its making (a service-account-token one would be filled
        # with the manager's token); the install ships its own.
        ("gpuctrl-webhook", "create", "secrets", f"-n={NAMESPACE}"),
        ("gpuctrl-webhook", "get", "secrets/gpuctrl-manager-token", f"-n={NAMESPACE}"),
        ("gpuctrl-webhook", "list", "secrets", f"-n={NAMESPACE}"),
        ("gpuctrl-webhook", "patch", "mutatingwebhookconfigurations/istio-sidecar-injector"),
        ("gpuctrl-webhook", "update", "podpolicies.gpuctrl.io", "--subresource=status"),
        ("gpuctrl-webhook", "list", "pods", f"-n={NAMESPACE}"),
    ]
    # kubectl names a custom resource only once its CRD is served: the Prometheus Operator's.
    crd = ("-f", str(SERVICE_MONITOR_CRD))
    await kubectl(plane.kubeconfig, "apply", "--server-side", *crd)
    await kubectl(plane.kubeconfig, "wait", "--for=condition=Established", "--timeout=60s", *crd)
    try:
        for account, *question in allowed:
            assert await can_i(plane, account, *question), (account, question)
        for account, *question in denied:
            assert not await can_i(plane, account, *question), (account, question)
    finally:
        await kubectl(plane.kubeconfig, "delete", *crd)


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
    # The webhook's Secret is shipped, empty, for --manage-certificates to fill in.
    shipped = await kubectl(
        plane.kubeconfig, "get", "secret", "gpuctrl-webhook-tls", f"-n={NAMESPACE}", "-o", "json"
    )
    assert json.loads(shipped)["type"] == "Opaque"
    assert not json.loads(shipped).get("data")
    await operands_as_manager(plane)
    await foreign_rbac_out_of_reach(plane)
    await check_privileges(plane)
    await uninstall(plane.kubeconfig, objects)
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
