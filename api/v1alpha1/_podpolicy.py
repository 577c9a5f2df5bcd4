"""PodPolicy: what gpuctrl's admission webhook sets on the pods it targets."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field

from api.v1alpha1._base import (
    MAX_LIST_ITEMS,
    ApiModel,
    ApiObject,
    LabelMap,
    ResourceRequirements,
)
from api.v1alpha1._cel import Rule, cel_rules, interpolated, literal
from api.v1alpha1._status import Condition

__all__ = [
    "MESH_OPT_OUTS",
    "LabelSelector",
    "LabelSelectorRequirement",
    "Mesh",
    "MeshOptOut",
    "PodPolicy",
    "PodPolicySpec",
    "PodPolicyStatus",
    "PodTargets",
    "TargetComponent",
    "mesh_opt_outs",
    "refused_key",
]

Mesh = Literal["istio", "linkerd", "kuma", "consul"]
TargetComponent = Literal[
    "validator-workloads",
    "driver",
    "toolkit",
    "validator",
    "device-plugin",
    "gpu-feature-discovery",
    "dcgm",
    "dcgm-exporter",
    "node-status-exporter",
    "mig-manager",
    "mps-control-daemon",
]


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


# Keys a PodPolicy may not set, by the owner of their namespace: what each would let a policy
# author change (see docs/podpolicy.md, "What a PodPolicy may set").
_REFUSED_DOMAINS: tuple[tuple[tuple[str, ...], str], ...] = (
    (
        ("kubernetes.io", "k8s.io"),
        "reserved for Kubernetes, whose keys change a pod's security, devices or scheduling "
        "(AppArmor, seccomp, CDI devices)",
    ),
    (("gpuctrl.io", "nvidia.com"), "gpuctrl's and NVIDIA's own keys, which gpuctrl relies on"),
    (
        ("istio.io", "linkerd.io", "kuma.io", "hashicorp.com"),
        "a service mesh's own configuration: spec.meshes turns a mesh off, nothing else of it "
        "may change",
    ),
    (("openshift.io",), "OpenShift's security context constraints"),
)
_RUNTIME_PREFIXES = ("io.kubernetes.", "io.containerd.", "io.katacontainers.", "run.oci.")
_SELECTOR_LABELS = frozenset({"app"})


def refused_key(key: str) -> str | None:
    """Why a PodPolicy may not set the label or annotation ``key``, or None when it may.

    Refused are the keys the operands' controllers select on, and every key under a domain
    whose owner gives it a meaning for security, devices, a mesh or gpuctrl itself (a domain
    and its subdomains: ``container.apparmor.security.beta.kubernetes.io``), and the container
    runtimes' annotations."""
    if key in _SELECTOR_LABELS:
        return (
            "the label NVIDIA's driver and MIG managers find the operands' pods by (and the "
            "driver's DaemonSets select theirs by)"
        )
    if key.startswith(_RUNTIME_PREFIXES):
        return (
            "a container runtime's annotation (CRI-O, containerd, Kata, OCI), which can "
            "change a container's devices or isolation"
        )
    domain = key.rpartition("/")[0]
    for owned, reason in _REFUSED_DOMAINS:
        if any(domain == d or domain.endswith(f".{d}") for d in owned):
            return reason
    return None


_NO_VALUES = f"self.operator in {literal(('Exists', 'DoesNotExist'))}"
_HAS_VALUES = "has(self.values) && size(self.values) > 0"


class LabelSelectorRequirement(ApiModel):
    """One requirement of a label selector's ``matchExpressions``, as in Kubernetes."""

    model_config = ConfigDict(
        json_schema_extra=cel_rules(
            Rule(
                rule=f"{_NO_VALUES} || {_HAS_VALUES}",
                message_expression=interpolated("operator {op} needs values", op="self.operator"),
            ),
            Rule(
                rule=f"!({_NO_VALUES}) || !({_HAS_VALUES})",
                message_expression=interpolated(
                    "operator {op} takes no values", op="self.operator"
                ),
            ),
        )
    )

    key: str = Field(min_length=1, description="The label key the requirement reads.")
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"] = Field(
        description="In, NotIn (the label's value is, is not among values), Exists or "
        "DoesNotExist (the label is, is not set; no values)."
    )
    values: list[str] = Field(
        default_factory=list, max_length=MAX_LIST_ITEMS, description="Values for In and NotIn."
    )


class LabelSelector(ApiModel):
    """A Kubernetes label selector."""

    match_labels: LabelMap = Field(default_factory=dict, description="Labels a pod must have.")
    match_expressions: list[LabelSelectorRequirement] = Field(
        default_factory=list,
        max_length=MAX_LIST_ITEMS,
        description="Requirements a pod's labels must all meet.",
    )


def _workload_pods() -> list[TargetComponent]:
    return ["validator-workloads"]


class PodTargets(ApiModel):
    """Which pods a PodPolicy applies to: those of the listed components, or matching selector.

    A pod is targeted when it belongs to one of ``components`` OR matches ``selector``.
    """

    components: list[TargetComponent] = Field(
        default_factory=_workload_pods,
        max_length=MAX_LIST_ITEMS,
        description="gpuctrl components whose pods are targeted.",
    )
    selector: LabelSelector | None = Field(
        default=None, description="Also target pods in the operator namespace with these labels."
    )


class PodPolicySpec(ApiModel):
    """What to set on targeted pods: mesh opt-outs, labels, annotations, resources."""

    targets: PodTargets = Field(default_factory=PodTargets, description="The pods to change.")
    meshes: list[Mesh] = Field(
        default_factory=list,
        max_length=MAX_LIST_ITEMS,
        description="Meshes whose sidecar injection is turned off.",
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
