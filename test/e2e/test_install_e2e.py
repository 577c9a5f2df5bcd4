"""Install, run and uninstall as a user would, with both install paths, on the local control plane.

The install (kustomize's or Helm's output, server-side applied) creates the ServiceAccounts and
RBAC; `gpuctrl manager` and `gpuctrl webhook` then run as local processes with kubeconfigs of
THEIR OWN ServiceAccounts, so any permission the install lacks shows as a 403 in the
apiserver's audit log, which fails the test. A ClusterPolicy and an Istio PodPolicy are
created; the operands converge on simulated GPU nodes; a workload pod created by the
validator's own account gets its mesh opt-out from the webhook. Uninstalling (the ClusterPolicy
first, then the install) deletes the operand pods gracefully (their 30 s grace period: the
toolkit's cleanup runs on SIGTERM) and leaves no gpuctrl object, but the CRDs where Helm keeps
them.

The objects go in as written. Run: ``.venv/bin/python -m pytest -q test/e2e``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from contextlib import AsyncExitStack, aclosing
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from e2e_stack import DAEMON_SETS, PODS, POLICIES, running_manager, running_webhook
from install_manifests import (
    CONFIG,
    NAMESPACE,
    documents,
    helm_crds,
    helm_render,
    install,
    kubectl,
    kustomize,
    uninstall,
)

from gpuctrl.runtime import Client, Resource, new_api_client
from gpuctrl.testing import ControlPlane, SimulatedKubelet, eventually, simulated_gpu_nodes

pytestmark = pytest.mark.slow

SAMPLES = CONFIG / "samples"
ACCOUNTS = ("gpuctrl-manager", "gpuctrl-webhook")
OPERAND_PODS = (
    "app.kubernetes.io/managed-by=gpuctrl,app.kubernetes.io/component!=validator-workloads"
)
HELM_KEEPS = ("clusterpolicies.gpuctrl.io", "podpolicies.gpuctrl.io")  # crds/: never deleted


def install_objects(path: str) -> list[dict[str, Any]]:
    """What each install path sends: kustomize's output plus the samples a user applies, or
    what `helm install -n gpuctrl --create-namespace` sends (namespace, crds/, templates)."""
    istio = documents(SAMPLES / "podpolicy-istio.yaml")
    if path == "kustomize":
        return [
            *kustomize(CONFIG / "default"),
            *documents(SAMPLES / "clusterpolicy-minimal.yaml"),
            *istio,
        ]
    namespace = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": NAMESPACE, "labels": {"app.kubernetes.io/part-of": "gpuctrl"}},
    }
    values = {"podPolicies": {policy["metadata"]["name"]: policy["spec"] for policy in istio}}
    return [namespace, *helm_crds(), *helm_render(values)]


def denials(audit_log: Path) -> list[str]:
    """Requests of the manager's or webhook's ServiceAccount that the apiserver refused (403)."""
    users = {f"system:serviceaccount:{NAMESPACE}:{account}" for account in ACCOUNTS}
    found = []
    for line in audit_log.read_text().splitlines():
        entry = json.loads(line)
        user = entry.get("user", {}).get("username")
        if user in users and (entry.get("responseStatus") or {}).get("code") == 403:
            ref = entry.get("objectRef") or {}
            where = f"{ref.get('namespace', '')}/{ref.get('name', '')}"
            found.append(f"{user}: {entry['verb']} {ref.get('resource')} {where}")
    return found


async def converged(admin: Client, name: str) -> None:
    async def is_ready() -> None:
        status = (await admin.get(POLICIES, name)).get("status") or {}
        assert status.get("state") == "ready", status

    await eventually(is_ready, within=180)


async def workload_pod_opted_out(plane: ControlPlane) -> None:
    """A validation workload pod, created as the validator's ServiceAccount (as `gpuctrl validate
    cuda` does), comes out of admission with Istio's opt-out label."""
    validator = await plane.service_account_kubeconfig(NAMESPACE, "gpuctrl-validator")
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": "gpuctrl-cuda-validation-",
            "namespace": NAMESPACE,
            "labels": {
                "app.kubernetes.io/managed-by": "gpuctrl",
                "app.kubernetes.io/component": "validator-workloads",
            },
        },
        "spec": {"restartPolicy": "Never", "containers": [{"name": "cuda", "image": "cuda"}]},
    }
    async with await new_api_client(validator) as api:
        created = await Client(api).create(PODS, pod)
    assert created["metadata"]["labels"]["sidecar.istio.io/inject"] == "false"


async def pod_policy_ready(admin: Client) -> None:
    """The manager's PodPolicy status controller reports the Istio policy Ready."""
    policies = Resource("gpuctrl.io/v1alpha1", "PodPolicy", "podpolicies", False)

    async def is_ready() -> None:
        (policy,) = await admin.list(policies)
        conditions = (policy.get("status") or {}).get("conditions") or []
        assert any(c["type"] == "Ready" and c["status"] == "True" for c in conditions), policy

    await eventually(is_ready, within=60)


async def record_deletion_grace(admin: Client, seen: dict[str, Any]) -> None:
    """Until cancelled: each operand pod's deletionGracePeriodSeconds when it is deleted."""
    path = f"/api/v1/namespaces/{NAMESPACE}/pods"
    query = {"labelSelector": OPERAND_PODS}
    limits = aiohttp.ClientTimeout(total=None, sock_read=None)
    async with aclosing(admin.watch(path, query, limits)) as events:
        async for event in events:
            meta = event["object"]["metadata"]
            if meta.get("deletionTimestamp"):
                seen.setdefault(meta["name"], meta.get("deletionGracePeriodSeconds"))


async def operands_gone(admin: Client) -> None:
    async def gone() -> None:
        assert await admin.list(DAEMON_SETS, NAMESPACE) == []
        pods = await admin.list(PODS, NAMESPACE, label_selector=OPERAND_PODS)
        assert pods == [], [p["metadata"]["name"] for p in pods]
        roles = await admin.list(
            await admin.resource("rbac.authorization.k8s.io/v1", "ClusterRole"),
            label_selector="app.kubernetes.io/managed-by=gpuctrl",
        )
        assert roles == []

    await eventually(gone, within=120)


async def remaining(plane: ControlPlane) -> list[str]:
    """gpuctrl's objects still in the cluster (Events, which expire, aside)."""
    kinds = (
        "deployments,daemonsets,services,serviceaccounts,secrets,configmaps,roles,rolebindings,"
        "poddisruptionbudgets,clusterroles,clusterrolebindings,runtimeclasses,"
        "mutatingwebhookconfigurations,customresourcedefinitions"
    )
    names: list[str] = []
    for selector in ("app.kubernetes.io/part-of=gpuctrl", "app.kubernetes.io/managed-by=gpuctrl"):
        found = await kubectl(plane.kubeconfig, "get", kinds, "-A", "-l", selector, "-o", "name")
        names += found.split()
    crds = await kubectl(plane.kubeconfig, "get", "crd", "-o", "name")
    names += [n for n in crds.split() if n.endswith(".gpuctrl.io")]
    namespaces = await kubectl(plane.kubeconfig, "get", "namespaces", "-o", "name")
    names += [n for n in namespaces.split() if n == f"namespace/{NAMESPACE}"]
    return sorted(set(names))


@pytest.mark.parametrize("path", ["kustomize", "helm"])
async def test_install_run_under_own_accounts_and_uninstall(path: str, tmp_path: Path) -> None:
    objects = install_objects(path)
    policy_name = next(o for o in objects if o["kind"] == "ClusterPolicy")["metadata"]["name"]
    async with ControlPlane(controller_manager=True, scheduler=True, audit=True) as plane:
        await install(plane.kubeconfig, objects)
        manager = await plane.service_account_kubeconfig(NAMESPACE, "gpuctrl-manager")
        webhook = await plane.service_account_kubeconfig(NAMESPACE, "gpuctrl-webhook")
        async with await new_api_client(plane.kubeconfig) as api:
            admin = Client(api)
            nodes = simulated_gpu_nodes("gpu", count=2, os_releases=[("ubuntu", "22.04")])
            # The nodes stay up through the uninstall, as a cluster's do: the install's own
            # pods then end as pods do (with no kubelet, only the pod GC would remove them).
            async with SimulatedKubelet(plane.kubeconfig, nodes), AsyncExitStack() as stack:
                await stack.enter_async_context(running_webhook(webhook, NAMESPACE, tmp_path))
                await stack.enter_async_context(
                    running_manager(manager, NAMESPACE, tmp_path / "manager.log", "--leader-elect")
                )
                try:
                    await converged(admin, policy_name)
                except AssertionError:
                    assert denials(plane.audit_log) == []  # a missing permission, named
                    raise
                await workload_pod_opted_out(plane)
                await pod_policy_ready(admin)
                # Uninstall, the ClusterPolicy first: its operands go with it.
                seen: dict[str, Any] = {}
                recorder = asyncio.create_task(record_deletion_grace(admin, seen))
                await asyncio.sleep(1)  # the watch is open
                await admin.delete(POLICIES, policy_name)
                await operands_gone(admin)
                recorder.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await recorder  # raises what the watch failed with
                # Operand pods were deleted gracefully (the pods' 30 s grace, never forced),
                # so the toolkit agent gets SIGTERM and runs its cleanup.
                assert any(name.startswith("gpuctrl-toolkit") for name in seen), seen
                assert set(seen.values()) == {30}, seen
                await stack.aclose()
                # manager and webhook stopped (SIGTERM, exit 0); now the install itself.
                assert denials(plane.audit_log) == []
                kept = [o for o in objects if o["kind"] != "CustomResourceDefinition"]
                await uninstall(plane.kubeconfig, kept if path == "helm" else objects)
        left = await remaining(plane)
        # Helm never deletes what crds/ installed; kustomize's install includes the CRDs.
        crds = [f"customresourcedefinition.apiextensions.k8s.io/{c}" for c in HELM_KEEPS]
        assert left == (crds if path == "helm" else [])
