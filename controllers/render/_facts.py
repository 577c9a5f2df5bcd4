"""The cluster facts a render needs, gathered before it starts: Nodes and named ConfigMaps."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from controllers.render._errors import MissingConfigMap

__all__ = ["ClusterFacts", "ConfigMapFacts", "NodeFacts", "OsRelease", "crd_served", "is_gpu_node"]

# NFD's labels of the node's /etc/os-release.
OS_ID_LABEL = "feature.node.kubernetes.io/system-os_release.ID"
OS_VERSION_LABEL = "feature.node.kubernetes.io/system-os_release.VERSION_ID"
# A node is a GPU node when gpuctrl (or NVIDIA's operator) marked it, or NFD saw NVIDIA's PCI id.
GPU_LABELS = (
    "nvidia.com/gpu.present",
    "feature.node.kubernetes.io/pci-10de.present",
    "feature.node.kubernetes.io/pci-0302_10de.present",
    "feature.node.kubernetes.io/pci-0300_10de.present",
)


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class OsRelease(_Frozen):
    """A node's OS as NFD reports it: ``ID`` and ``VERSION_ID`` of /etc/os-release."""

    id: str
    version_id: str

    @property
    def tag(self) -> str:
        """The driver image tag suffix NVIDIA publishes, e.g. ``ubuntu22.04``."""
        return f"{self.id}{self.version_id}"


class NodeFacts(_Frozen):
    """What the renderer knows of a Node: its name and labels."""

    name: str
    labels: Mapping[str, str] = Field(default_factory=dict)

    @property
    def os(self) -> OsRelease | None:
        """The node's OS from its NFD labels; None when NFD has not labelled it."""
        os_id, version = self.labels.get(OS_ID_LABEL), self.labels.get(OS_VERSION_LABEL)
        if not os_id or not version:
            return None
        return OsRelease(id=os_id, version_id=version)


class ConfigMapFacts(_Frozen):
    """A ConfigMap of the operator namespace that the policy names: its name and data."""

    name: str
    data: Mapping[str, str] = Field(default_factory=dict)


def crd_served(crd: Mapping[str, Any]) -> bool:
    """Whether the apiserver takes new objects of ``crd``: Established, not being deleted."""
    conditions = (crd.get("status") or {}).get("conditions") or ()
    established = any(
        c.get("type") == "Established" and c.get("status") == "True" for c in conditions
    )
    return established and not crd["metadata"].get("deletionTimestamp")


def is_gpu_node(node: NodeFacts) -> bool:
    """Whether ``node`` has an NVIDIA GPU, by gpuctrl's / NVIDIA's / NFD's labels."""
    return any(node.labels.get(label) == "true" for label in GPU_LABELS)


class ClusterFacts(_Frozen):
    """Everything of the cluster a render reads; ConfigMaps are those of ``namespace``;
    ``crds``: the names of the optional CRDs that are established (a ServiceMonitor is rendered
    only where its CRD is)."""

    namespace: str = "gpuctrl"
    nodes: tuple[NodeFacts, ...] = ()
    config_maps: tuple[ConfigMapFacts, ...] = ()
    crds: frozenset[str] = frozenset()

    @classmethod
    def from_objects(
        cls,
        namespace: str,
        nodes: Iterable[Mapping[str, Any]],
        config_maps: Iterable[Mapping[str, Any]],
        crds: Iterable[Mapping[str, Any]] = (),
    ) -> ClusterFacts:
        """Facts from Kubernetes objects (Node, ConfigMap and CustomResourceDefinition mappings
        as the apiserver sends them).

        ConfigMaps outside ``namespace`` are left out; binaryData is not read; a CRD counts
        when its Established condition is True and it is not being deleted (the apiserver
        then refuses new objects of it).
        """
        return cls(
            namespace=namespace,
            crds=frozenset(c["metadata"]["name"] for c in crds if crd_served(c)),
            nodes=tuple(
                NodeFacts(name=n["metadata"]["name"], labels=n["metadata"].get("labels") or {})
                for n in nodes
            ),
            config_maps=tuple(
                ConfigMapFacts(name=c["metadata"]["name"], data=c.get("data") or {})
                for c in config_maps
                if c["metadata"].get("namespace", namespace) == namespace
            ),
        )

    @classmethod
    def from_node_states(
        cls,
        namespace: str,
        states: Iterable[tuple[Mapping[str, str], Iterable[str]]],
        config_maps: Iterable[Mapping[str, Any]],
        crds: Iterable[Mapping[str, Any]] = (),
    ) -> ClusterFacts:
        """As `from_objects` of the Nodes in name order, given as a cache groups them: each
        distinct set of labels with the names of its Nodes. The labels, which the apiserver
        checked, are not validated again, and the Nodes of a set share one mapping (a render
        of 10,000 Nodes holds 10,000 small objects, not 10,000 copies of their labels)."""
        nodes = sorted(
            (
                NodeFacts.model_construct(name=name, labels=labels)
                for labels, names in states
                for name in names
            ),
            key=lambda node: node.name,
        )
        facts = cls.from_objects(namespace, (), config_maps, crds)
        return facts.model_copy(update={"nodes": tuple(nodes)})

    def config_map(self, name: str) -> ConfigMapFacts | None:
        """The ConfigMap called ``name``, if it was gathered."""
        return next((c for c in self.config_maps if c.name == name), None)

    def named_config_map(self, path: str, name: str | None) -> ConfigMapFacts | None:
        """The ConfigMap the policy names at ``path`` (None when it names none); raises
        `MissingConfigMap` when it was not gathered."""
        if name is None:
            return None
        found = self.config_map(name)
        if found is None:
            raise MissingConfigMap(path, name, self.namespace)
        return found

    def gpu_nodes(self) -> list[NodeFacts]:
        """The GPU nodes, by name."""
        return sorted((n for n in self.nodes if is_gpu_node(n)), key=lambda n: n.name)
