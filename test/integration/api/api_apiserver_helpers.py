"""Creating any object gpuctrl renders or defines, through the typed kubernetes-asyncio APIs."""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client import ApiClient


async def create(api: ApiClient, obj: dict[str, Any], *, dry_run: bool = True) -> Any:
    """Create ``obj`` (any kind gpuctrl renders or defines); server-side dry run by default."""
    options = {"dry_run": "All"} if dry_run else {}
    kind, namespace = obj["kind"], obj["metadata"].get("namespace")
    if obj["apiVersion"] == "gpuctrl.io/v1alpha1":
        plural = {"ClusterPolicy": "clusterpolicies", "PodPolicy": "podpolicies"}[kind]
        custom = client.CustomObjectsApi(api)
        return await custom.create_cluster_custom_object(
            "gpuctrl.io", "v1alpha1", plural, obj, **options
        )
    core, apps, rbac = (
        client.CoreV1Api(api),
        client.AppsV1Api(api),
        client.RbacAuthorizationV1Api(api),
    )
    namespaced = {
        "ServiceAccount": core.create_namespaced_service_account,
        "ConfigMap": core.create_namespaced_config_map,
        "Service": core.create_namespaced_service,
        "DaemonSet": apps.create_namespaced_daemon_set,
        "Role": rbac.create_namespaced_role,
        "RoleBinding": rbac.create_namespaced_role_binding,
    }
    cluster = {
        "ClusterRole": rbac.create_cluster_role,
        "ClusterRoleBinding": rbac.create_cluster_role_binding,
        "RuntimeClass": client.NodeV1Api(api).create_runtime_class,
    }
    if kind in namespaced:
        return await namespaced[kind](namespace, obj, **options)
    return await cluster[kind](obj, **options)
