"""PodPolicy: what gpuctrl's admission webhook sets on the pods it targets."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from api.v1alpha1._base import ApiModel, ApiObject, LabelMap, ResourceRequirements
from api.v1alpha1._status import Condition

__all__ = [
    "MESH_OPT_OUTS",
    "LabelSelector",
    "Mesh",
    "MeshOptOut",
    "PodPolicy",
    "PodPolicySpec",
    "PodPolicyStatus",
    "PodTargets",
    "TargetComponent",
    "mesh_opt_outs",
]

Mesh = Literal["istio", "linkerd", "kuma", "consul"]
TargetComponent = Literal["validator-workloads", "driver", "toolkit", "validator", "device-plugin"]


class MeshOptOut(ApiModel):
    """The label or annotation that keeps a mesh from injecting its sidecar into a pod."""

    kind: Literal["label", "annotation"]
    key: str
    value: str


# Each mesh's documented pod-level opt-out (see reference/admission.md).
MESH_OPT_OUTS: dict[Mesh, MeshOptOut] = {
    "istio": MeshOptOut(kind="label", key="sidecar.istio.io/inject", value="false"),
    "linkerd": MeshOptOut(kind="annotation", key="linkerd.io/inject", value="disabled"),
    "kuma": MeshOptOut(kind="label", key="kuma.io/sidecar-injection", value="disabled"),
    "consul": MeshOptOut(
        kind="annotation", key="consul.hashicorp.com/connect-inject", value="false"
    ),
}


def mesh_opt_outs(meshes: list[Mesh]) -> tuple[dict[str, str], dict[str, str]]:
    """The (labels, annotations) that opt a pod out of every mesh in ``meshes``."""
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    for mesh in meshes:
        opt_out = MESH_OPT_OUTS[mesh]
        (labels if opt_out.kind == "label" else annotations)[opt_out.key] = opt_out.value
    return labels, annotations


class LabelSelector(ApiModel):
    """A Kubernetes label selector."""

    match_labels: LabelMap = Field(default_factory=dict, description="Labels a pod must have.")
    match_expressions: list[dict[str, Any]] = Field(
        default_factory=list, description="Selector requirements (key, operator, values)."
    )


def _workload_pods() -> list[TargetComponent]:
    return ["validator-workloads"]


class PodTargets(ApiModel):
    """Which pods a PodPolicy applies to: those of the listed components, or matching selector.

    A pod is targeted when it belongs to one of ``components`` OR matches ``selector``.
    """

    components: list[TargetComponent] = Field(
        default_factory=_workload_pods,
        description="gpuctrl components whose pods are targeted.",
    )
    selector: LabelSelector | None = Field(
        default=None, description="Also target pods in the operator namespace with these labels."
    )


class PodPolicySpec(ApiModel):
    """What to set on targeted pods: mesh opt-outs, labels, annotations, resources."""

    targets: PodTargets = Field(default_factory=PodTargets, description="The pods to change.")
    meshes: list[Mesh] = Field(
        default_factory=list, description="Meshes whose sidecar injection is turned off."
    )
    labels: LabelMap = Field(default_factory=dict, description="Labels set on targeted pods.")
    annotations: LabelMap = Field(
        default_factory=dict, description="Annotations set on targeted pods."
    )
    resources: ResourceRequirements | None = Field(
        default=None, description="Resources set on every container of targeted pods."
    )


class PodPolicyStatus(ApiModel):
    """What the manager observed: ``Ready`` (with the generation it read) and ``Targeting``
    (False when the policy's targets can match no pod gpuctrl makes)."""

    conditions: list[Condition] = Field(
        default_factory=list,
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["type"],
        },
        description="Conditions, one per type.",
    )


class PodPolicy(ApiObject):
    """A ``gpuctrl.io/v1alpha1`` PodPolicy object (cluster-scoped)."""

    kind: Literal["PodPolicy"] = "PodPolicy"
    spec: PodPolicySpec = Field(default_factory=PodPolicySpec)
    status: PodPolicyStatus = Field(default_factory=PodPolicyStatus)
