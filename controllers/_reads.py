"""What the controllers cache and how they read it: the facts a render needs, gpuctrl's own
objects, the ClusterPolicies by age. One informer per resource and selector, so
each is watched once however many controllers read it; Nodes and Pods are cached trimmed to
the fields read here (`TRANSFORMS`). Nodes are also indexed by their `node_state` (the labels
the controllers read), so what concerns every Node (`node_states`, `cluster_facts`) costs a
few distinct states, not thousands of decoded Nodes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from controllers._kinds import (
    CLUSTER_POLICIES,
    CONFIG_MAPS,
    CRDS,
    MANAGED_SELECTOR,
    NODES,
    OPTIONAL,
    PODS,
    ROLE_BINDINGS,
    ROLES,
)
from controllers._labels import READ_LABELS
from controllers._upgrade_plan import upgraded
from controllers.render import NODE_EVENTS_NAMESPACE, ClusterFacts
from controllers.render._facts import GPU_LABELS, OS_ID_LABEL, OS_VERSION_LABEL
from gpuctrl.runtime import (
    Cache,
    Event,
    IndexFunc,
    Informer,
    Mapper,
    Predicate,
    Resource,
    Transform,
    Watch,
)

__all__ = [
    "TRANSFORMS",
    "cached",
    "cached_list",
    "cluster_facts",
    "informer",
    "informer_terms",
    "informers",
    "node_role_changed",
    "node_state",
    "node_states",
    "oldest_policy",
    "owned_objects",
    "prunable",
    "ready_components",
    "state_nodes",
    "watches",
]


def _container_summary(entry: Mapping[str, Any]) -> dict[str, Any]:
    """A container's status less its times: name, restarts, readiness, how it runs or ended."""

    def state(found: Mapping[str, Any] | None) -> dict[str, Any]:
        return {k: {"exitCode": v.get("exitCode")} for k, v in (found or {}).items()}

    return {
        "name": entry.get("name"),
        "restartCount": entry.get("restartCount", 0),
        "ready": entry.get("ready", False),
        "state": state(entry.get("state")),
        "lastState": state(entry.get("lastState")),
    }


def _pod_summary(pod: dict[str, Any]) -> dict[str, Any]:
    """An operand Pod as readiness and the driver upgrade need it: metadata, node, phase,
    conditions and its containers' restarts and states."""
    meta = {k: v for k, v in pod["metadata"].items() if k != "managedFields"}
    status = pod.get("status") or {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"nodeName": (pod.get("spec") or {}).get("nodeName")},
        "status": {
            "phase": status.get("phase"),
            "conditions": status.get("conditions") or [],
            **{
                key: [_container_summary(c) for c in status.get(key) or ()]
                for key in ("containerStatuses", "initContainerStatuses")
            },
        },
    }


def _node_summary(node: dict[str, Any]) -> dict[str, Any]:
    """A Node (watched metadata-only) as the controllers read it: its name, identity and the
    labels of `READ_LABELS`; NFD's hundreds of other labels and every annotation are left out."""
    meta = node["metadata"]
    labels = meta.get("labels") or {}
    kept = {k: meta[k] for k in ("name", "uid", "resourceVersion") if k in meta}
    kept["labels"] = {k: labels[k] for k in READ_LABELS if k in labels}
    return {"apiVersion": node.get("apiVersion"), "kind": node.get("kind"), "metadata": kept}


def _crd_summary(crd: dict[str, Any]) -> dict[str, Any]:
    """What the controllers read of a CRD: its name and whether it is served (`crd_served`)."""
    meta = crd["metadata"]
    kept = {
        k: meta[k] for k in ("name", "uid", "resourceVersion", "deletionTimestamp") if k in meta
    }
    conditions = (crd.get("status") or {}).get("conditions") or ()
    status = {"conditions": [{k: c.get(k) for k in ("type", "status")} for c in conditions]}
    return {
        "apiVersion": crd.get("apiVersion"),
        "kind": crd.get("kind"),
        "metadata": kept,
        "status": status,
    }


TRANSFORMS: dict[Resource, Transform] = {
    NODES: _node_summary,
    PODS: _pod_summary,
    CRDS: _crd_summary,
}
"""The manager's cache transforms for the resources the controllers trim (Nodes are also
watched metadata-only)."""
# The optional kinds' CRDs, watched by name (the manager may read no other CRD).
[_OPTIONAL_CRD] = [crd for _, crd in OPTIONAL.values()]


def _options(resource: Resource) -> dict[str, Any]:
    """The options of the informers the controllers use for ``resource``."""
    if resource == NODES:
        return {"metadata_only": True}
    if resource == CRDS:
        return {"field_selector": f"metadata.name={_OPTIONAL_CRD}"}
    if resource in (CLUSTER_POLICIES, CONFIG_MAPS):
        return {}
    return {"label_selector": MANAGED_SELECTOR}


def _scopes(resource: Resource, namespace: str) -> tuple[str | None, ...]:
    """The namespaces the controllers watch ``resource`` in (None: a cluster-scoped kind)."""
    if not resource.namespaced:
        return (None,)
    if resource in (ROLES, ROLE_BINDINGS):
        return tuple(dict.fromkeys((namespace, NODE_EVENTS_NAMESPACE)))
    return (namespace,)


def informers(cache: Cache, resource: Resource, namespace: str) -> list[Informer]:
    """The informers the controllers use for ``resource``, one per namespace it is watched in:
    every ClusterPolicy; every Node, metadata only, indexed by `node_state`; the operand
    namespace's ConfigMaps (referenced ones are not gpuctrl's); gpuctrl's objects of any other
    kind in the operand namespace, Roles and RoleBindings also in `NODE_EVENTS_NAMESPACE`
    (the validator's), and cluster-scoped ones; the optional kinds' CRDs by name. Nothing is
    watched in another namespace, so the manager needs no read access there."""
    found = []
    for where in _scopes(resource, namespace):
        one = cache.informer(resource, namespace=where, **_options(resource))
        for name, func in _INDEXES.get(resource, ()):
            if not one.store.has_index(name):
                one.add_index(name, func)
        found.append(one)
    return found


def informer(cache: Cache, resource: Resource, namespace: str) -> Informer:
    """The one informer of `informers` for a ``resource`` watched in one place."""
    [found] = informers(cache, resource, namespace)
    return found


_NODE_STATES = "gpuctrl-node-state"
_AGES = "gpuctrl-age"
_READY_ON = "gpuctrl-ready-on"


def node_state(node: Mapping[str, Any]) -> str:
    """The labels of ``node`` that the controllers read (`READ_LABELS`), as canonical JSON:
    nodes in one state are labelled, rendered for and counted alike."""
    labels = node["metadata"].get("labels") or {}
    return json.dumps({k: labels[k] for k in READ_LABELS if k in labels}, sort_keys=True)


def node_states(cache: Cache, namespace: str) -> list[tuple[dict[str, str], list[str]]]:
    """Each distinct `node_state` among the cached Nodes (its labels) with the names of the
    Nodes in it; no Node is decoded."""
    store = informer(cache, NODES, namespace).store
    return [
        (json.loads(state), store.index_keys(_NODE_STATES, state))
        for state in store.index_values(_NODE_STATES)
    ]


def cached(
    cache: Cache, resource: Resource, namespace: str, name: str, where: str | None = None
) -> dict[str, Any] | None:
    """The object ``name`` (in namespace ``where``) as `informers` hold it; None when it is not
    there or ``where`` is not watched for ``resource``."""
    if where not in _scopes(resource, namespace):
        return None
    return cache.get(resource, name, where, **_options(resource))


def cached_list(cache: Cache, resource: Resource, namespace: str) -> list[dict[str, Any]]:
    """Every object `informers` hold for ``resource``."""
    options = _options(resource)
    return [
        o for where in _scopes(resource, namespace) for o in cache.list(resource, where, **options)
    ]


def owned_objects(
    cache: Cache, resource: Resource, namespace: str, component: str, owner: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """The cached objects of ``resource`` labelled with ``component`` that gpuctrl made for
    ``owner`` (`prunable`): what a controller may delete once it no longer renders them."""
    found = cached_list(cache, resource, namespace)
    return [
        o
        for o in found
        if _labels(o).get("app.kubernetes.io/component") == component and prunable(o, owner)
    ]


_MANAGED_BY, _, _GPUCTRL = MANAGED_SELECTOR.partition("=")


def prunable(obj: Mapping[str, Any], owner: Mapping[str, Any]) -> bool:
    """Whether gpuctrl made ``obj`` for ``owner`` (the honoured ClusterPolicy), so a controller
    may delete it: it carries gpuctrl's managed-by label and a controller owner reference with
    ``owner``'s uid. Nothing else is, whatever its labels: a user's object that copies them,
    one another policy controls, one ``owner`` merely co-owns."""
    meta = obj["metadata"]
    uid = owner["metadata"].get("uid")
    return (
        bool(uid)
        and _labels(obj).get(_MANAGED_BY) == _GPUCTRL
        and any(
            ref.get("controller") is True and ref.get("uid") == uid
            for ref in meta.get("ownerReferences") or ()
        )
    )


def _labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return obj["metadata"].get("labels") or {}


def _age(obj: Mapping[str, Any]) -> tuple[bool, str, str]:
    # RFC 3339 timestamps from the apiserver have one fixed format: they sort as text.
    created = obj["metadata"].get("creationTimestamp")
    return (created is None, str(created or ""), str(obj["metadata"]["name"]))


def _ready_on(pod: Mapping[str, Any]) -> tuple[str, ...]:
    """``node/component`` for a pod whose Ready condition is True, else nothing."""
    conditions = (pod.get("status") or {}).get("conditions") or ()
    if not any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
        return ()
    component = _labels(pod).get("app.kubernetes.io/component", "")
    return (f"{(pod.get('spec') or {}).get('nodeName')}/{component}",)


# The indexes `informer` adds, by resource: Nodes by state, ClusterPolicies by `_age`, Pods by
# the node and component of those Ready.
_INDEXES: dict[Resource, tuple[tuple[str, IndexFunc], ...]] = {
    NODES: ((_NODE_STATES, lambda node: (node_state(node),)),),
    CLUSTER_POLICIES: ((_AGES, lambda policy: (json.dumps(_age(policy)),)),),
    PODS: ((_READY_ON, _ready_on),),
}


def ready_components(cache: Cache, namespace: str) -> dict[str, set[str]]:
    """By node name, the components of which a cached Pod there is Ready (none decoded)."""
    found: dict[str, set[str]] = {}
    for value in informer(cache, PODS, namespace).store.index_values(_READY_ON):
        node, _, component = value.rpartition("/")
        found.setdefault(node, set()).add(component)
    return found


def oldest_policy(cache: Cache) -> str | None:
    """The name of the oldest cached ClusterPolicy (ties by name), from the age index (none
    decoded)."""
    store = informer(cache, CLUSTER_POLICIES, "").store
    ages = [json.loads(age) for age in store.index_values(_AGES)]
    return str(min(ages)[2]) if ages else None


def watches(
    cache: Cache,
    resource: Resource,
    namespace: str,
    mapper: Mapper,
    predicates: Sequence[Predicate],
) -> list[Watch]:
    """Builder watches mapping ``resource``'s events (passing ``predicates``) through ``mapper``,
    on the informers of `informers` (their indexes added)."""
    informers(cache, resource, namespace)  # their indexes, before any event
    return [
        Watch(resource, mapper, predicates, namespace=where, **_options(resource))
        for where in _scopes(resource, namespace)
    ]


def informer_terms(resource: Resource) -> dict[str, Any]:
    """The selector and form keywords of ``resource``'s informers, as the builder takes them
    for a controller's primary type."""
    return _options(resource)


def _node_role(obj: Mapping[str, Any]) -> tuple[bool, str | None, str | None, bool]:
    labels = obj["metadata"].get("labels") or {}
    gpu = any(labels.get(label) == "true" for label in GPU_LABELS)
    return gpu, labels.get(OS_ID_LABEL), labels.get(OS_VERSION_LABEL), upgraded(labels)


def node_role_changed(event: Event) -> bool:
    """Passes Node adds, deletes, resyncs and updates that change what an operand reads of a
    node: whether it has a GPU, its OS, whether its driver upgrade is done (not the deploy
    labels the labeller writes)."""
    return (
        event.type != "update"
        or event.old is None
        or event.old is event.obj
        or _node_role(event.old) != _node_role(event.obj)
    )


def cluster_facts(cache: Cache, namespace: str) -> ClusterFacts:
    """The render's facts: every Node (by name) with the labels a render reads, the operand
    namespace's ConfigMaps, and which optional CRDs are served."""
    return ClusterFacts.from_node_states(
        namespace,
        node_states(cache, namespace),
        cached_list(cache, CONFIG_MAPS, namespace),
        cached_list(cache, CRDS, namespace),
    )


def state_nodes(states: Iterable[tuple[dict[str, str], list[str]]]) -> list[dict[str, Any]]:
    """Node mappings (name and labels, by name) rebuilt from `node_states`."""
    found = [{"metadata": {"name": n, "labels": labels}} for labels, names in states for n in names]
    return sorted(found, key=lambda node: str(node["metadata"]["name"]))
