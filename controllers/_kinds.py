"""The API resources the controllers read and write, and how gpuctrl's own objects are found."""

from __future__ import annotations

from api.v1alpha1 import CLUSTER_POLICY, POD_POLICY, SERVICE_MONITOR_CRD
from gpuctrl.runtime import Resource

__all__ = [
    "CLUSTER_POLICIES",
    "CLUSTER_ROLES",
    "CLUSTER_ROLE_BINDINGS",
    "CONFIG_MAPS",
    "CRDS",
    "DAEMON_SETS",
    "MANAGED_SELECTOR",
    "NAMESPACES",
    "NODES",
    "OPTIONAL",
    "OWNED",
    "PODS",
    "POD_POLICIES",
    "ROLES",
    "ROLE_BINDINGS",
    "RUNTIME_CLASSES",
    "SERVICES",
    "SERVICE_ACCOUNTS",
    "SERVICE_MONITORS",
]

CLUSTER_POLICIES = Resource(*CLUSTER_POLICY)
POD_POLICIES = Resource(*POD_POLICY)
NODES = Resource("v1", "Node", "nodes", False)
NAMESPACES = Resource("v1", "Namespace", "namespaces", False)
CONFIG_MAPS = Resource("v1", "ConfigMap", "configmaps")
PODS = Resource("v1", "Pod", "pods")
SERVICE_ACCOUNTS = Resource("v1", "ServiceAccount", "serviceaccounts")
SERVICES = Resource("v1", "Service", "services")
DAEMON_SETS = Resource("apps/v1", "DaemonSet", "daemonsets")
ROLES = Resource("rbac.authorization.k8s.io/v1", "Role", "roles")
ROLE_BINDINGS = Resource("rbac.authorization.k8s.io/v1", "RoleBinding", "rolebindings")
CLUSTER_ROLES = Resource("rbac.authorization.k8s.io/v1", "ClusterRole", "clusterroles", False)
CLUSTER_ROLE_BINDINGS = Resource(
    "rbac.authorization.k8s.io/v1", "ClusterRoleBinding", "clusterrolebindings", False
)
RUNTIME_CLASSES = Resource("node.k8s.io/v1", "RuntimeClass", "runtimeclasses", False)
CRDS = Resource(
    "apiextensions.k8s.io/v1", "CustomResourceDefinition", "customresourcedefinitions", False
)
SERVICE_MONITORS = Resource("monitoring.coreos.com/v1", "ServiceMonitor", "servicemonitors")

# Every object gpuctrl renders carries this label (see controllers.render).
MANAGED_SELECTOR = "app.kubernetes.io/managed-by=gpuctrl"
# The kinds an operand may render, by (apiVersion, kind).
OWNED = {
    (r.api_version, r.kind): r
    for r in (
        SERVICE_ACCOUNTS,
        ROLES,
        ROLE_BINDINGS,
        CLUSTER_ROLES,
        CLUSTER_ROLE_BINDINGS,
        DAEMON_SETS,
        CONFIG_MAPS,
        SERVICES,
        RUNTIME_CLASSES,
    )
}
# The kinds an operand may render whose CRD a cluster may lack, by (apiVersion, kind), with
# their CRD's name: never cached (an informer of a kind the apiserver does not serve never
# syncs), so read, applied and pruned through the apiserver, and only where the CRD is served.
OPTIONAL = {
    (r.api_version, r.kind): (r, crd) for r, crd in ((SERVICE_MONITORS, SERVICE_MONITOR_CRD),)
}
