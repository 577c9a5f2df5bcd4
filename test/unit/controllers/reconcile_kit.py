"""A hand-filled cache and recording writers, for the operator's reconcilers without a cluster
(the fixtures are in this folder's conftest).

`HandFilledCache` puts objects into the informers the controllers read (the manager's
transforms applied, gpuctrl's label selector honoured as the apiserver would); `Writes`
records what a reconciler sends (applies, deletes, patches), refusing what a test says;
`StatusRecord` stands in for `controllers._status.PolicyStatus` and keeps every condition,
status field and Event written.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from controllers._kinds import CLUSTER_POLICIES, CRDS, MANAGED_SELECTOR, NODES, OWNED, PODS
from controllers._reads import informer_terms, informers
from gpuctrl.runtime import ApiError, Cache, NotFound, Resource

NAMESPACE = "gpuctrl"
NFD = "feature.node.kubernetes.io"
GPU_LABEL = f"{NFD}/pci-10de.present"
OS_ID = f"{NFD}/system-os_release.ID"
OS_VERSION = f"{NFD}/system-os_release.VERSION_ID"
POLICY_UID = "policy-uid"

_RESOURCES: dict[tuple[str, str], Resource] = {
    **OWNED,
    **{(r.api_version, r.kind): r for r in (NODES, PODS, CLUSTER_POLICIES, CRDS)},
}
_MANAGED_BY, _, _GPUCTRL = MANAGED_SELECTOR.partition("=")


class HandFilledCache:
    """The manager's cache with every informer the controllers read synced empty, filled with
    `put` and emptied with `remove` (each delivering the event a watch would)."""

    def __init__(self, cache: Cache) -> None:
        self.cache = cache
        self._versions = itertools.count(1)
        for resource in _RESOURCES.values():
            for one in informers(cache, resource, NAMESPACE):
                one.replace([])

    def put(self, *objs: dict[str, Any]) -> None:
        """Add or update each object, with a new resourceVersion as the apiserver gives it."""
        for obj in objs:
            obj["metadata"]["resourceVersion"] = str(next(self._versions))
            for one in self._informers(obj):
                one.apply("MODIFIED", obj)

    def remove(self, *objs: dict[str, Any]) -> None:
        """Delete each object."""
        for obj in objs:
            for one in self._informers(obj):
                one.apply("DELETED", obj)

    def _informers(self, obj: dict[str, Any]) -> Iterable[Any]:
        resource = _RESOURCES[(obj["apiVersion"], obj["kind"])]
        terms = informer_terms(resource)
        labels = obj["metadata"].get("labels") or {}
        if terms.get("label_selector") == MANAGED_SELECTOR and labels.get(_MANAGED_BY) != _GPUCTRL:
            return ()  # the apiserver would not list it to gpuctrl's informer
        where = obj["metadata"].get("namespace") if resource.namespaced else None
        return (self.cache.informer(resource, namespace=where, **terms),)


@dataclass
class Writes:
    """A `gpuctrl.runtime.Client` that records writes; ``refuse`` maps an object's (kind, name)
    to the error its apply raises; ``stored`` holds, by (kind, namespace, name), what the
    apiserver has of the kinds never cached (`controllers._kinds.OPTIONAL`), for its reads."""

    applied: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    deleted: list[tuple[str, str | None, str]] = field(default_factory=list)
    delete_options: list[dict[str, Any]] = field(default_factory=list)
    patched: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    refuse: dict[tuple[str, str], ApiError] = field(default_factory=dict)
    stored: dict[tuple[str, str | None, str], dict[str, Any]] = field(default_factory=dict)
    reads: int = 0

    async def get(self, resource: Resource, name: str, namespace: str | None = None) -> Any:
        self.reads += 1
        found = self.stored.get((resource.kind, namespace, name))
        if found is None:
            raise NotFound(404, "NotFound", f"{resource.plural} {name!r} not found")
        return found

    async def list(
        self, resource: Resource, namespace: str | None = None, *, label_selector: str = ""
    ) -> list[dict[str, Any]]:
        self.reads += 1
        wanted = dict(term.split("=", 1) for term in label_selector.split(",") if term)
        return [
            obj
            for (kind, where, _), obj in self.stored.items()
            if kind == resource.kind
            and where == namespace
            and wanted.items() <= (obj["metadata"].get("labels") or {}).items()
        ]

    async def apply(
        self, resource: Resource, obj: dict[str, Any], *, field_manager: str, **_: Any
    ) -> dict[str, Any]:
        refused = self.refuse.get((obj["kind"], obj["metadata"]["name"]))
        if refused is not None:
            raise refused
        self.applied.append((field_manager, obj))
        return obj

    async def delete(
        self, resource: Resource, name: str, namespace: str | None = None, **options: Any
    ) -> None:
        self.deleted.append((resource.kind, namespace, name))
        self.delete_options.append(options)

    async def request(self, method: str, path: str, *, body: Any = None, **_: Any) -> Any:
        self.patched.append((path, body))
        return body

    @property
    def count(self) -> int:
        """Every write recorded."""
        return len(self.applied) + len(self.deleted) + len(self.patched)


@dataclass
class StatusRecord:
    """A `controllers._status.PolicyStatus` that records: ``conditions`` by type (the last
    written), ``fields`` (the last top-level status fields), ``events`` as (type, reason,
    text), and ``quiet`` by condition type."""

    conditions: dict[str, dict[str, Any]] = field(default_factory=dict)
    fields: dict[str, Any] = field(default_factory=dict)
    events: list[tuple[str, str, str]] = field(default_factory=list)
    quiet: dict[str, bool] = field(default_factory=dict)

    async def write(
        self,
        policy: Any,
        conditions: list[dict[str, Any]],
        fields: Any = None,
        *,
        quiet: bool = False,
    ) -> bool:
        for entry in conditions:
            self.conditions[entry["type"]] = entry
            self.quiet[entry["type"]] = quiet
        self.fields.update(fields or {})
        return True

    def event(self, policy: Any, type: str, reason: str, text: str) -> None:
        self.events.append((type, reason, text))

    def status_of(self, type: str) -> tuple[str, str]:
        """The (status, reason) of condition ``type`` as last written."""
        entry = self.conditions[type]
        return entry["status"], entry["reason"]


def gpu_node(name: str, os_id: str = "ubuntu", version: str = "22.04", **labels: str) -> Any:
    """A Node NFD found an NVIDIA GPU on (with its OS labels unless ``os_id`` is empty)."""
    found = {GPU_LABEL: "true", **labels}
    if os_id:
        found |= {OS_ID: os_id, OS_VERSION: version}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": found}}


def cluster_policy(
    spec: dict[str, Any] | None = None,
    *,
    name: str = "cluster",
    created: str = "2026-01-01T00:00:00Z",
    generation: int = 1,
    conditions: Iterable[dict[str, Any]] = (),
) -> dict[str, Any]:
    """A stored ClusterPolicy (uid `POLICY_UID` for the default name)."""
    return {
        "apiVersion": CLUSTER_POLICIES.api_version,
        "kind": CLUSTER_POLICIES.kind,
        "metadata": {
            "name": name,
            "uid": POLICY_UID if name == "cluster" else f"{name}-uid",
            "generation": generation,
            "creationTimestamp": created,
        },
        "spec": spec or {},
        "status": {"conditions": list(conditions)},
    }
