"""Settings shared by every operand DaemonSet, and the operator-wide section."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from api.v1alpha1._base import (
    MAX_LIST_ITEMS,
    ApiModel,
    DnsLabel,
    LabelMap,
    ObjectName,
    Toleration,
)

__all__ = ["ContainerRuntime", "DaemonsetsSpec", "OperatorSpec", "RollingUpdate"]

# The container runtimes the toolkit agent configures (NVIDIA's operator.defaultRuntime values
# less docker, which Kubernetes has not run since dockershim went in 1.24).
ContainerRuntime = Literal["containerd", "crio"]


_PERCENT = r"^([1-9][0-9]?|100)%$"


class RollingUpdate(ApiModel):
    """How many pods a RollingUpdate may take down at once."""

    # A DaemonSet rejects 0 and 0%: a rolling update must be able to take one pod down.
    max_unavailable: Annotated[int, Field(ge=1)] | Annotated[str, Field(pattern=_PERCENT)] = Field(
        default=1,
        json_schema_extra={"minimum": 1, "pattern": _PERCENT},
        description="A number of nodes (at least 1), or a percentage from 1% to 100%.",
    )


def _default_tolerations() -> list[Toleration]:
    # NVIDIA's default: GPU nodes are commonly tainted nvidia.com/gpu:NoSchedule.
    return [Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")]


class DaemonsetsSpec(ApiModel):
    """Metadata and scheduling applied to every operand DaemonSet and its pods."""

    labels: LabelMap = Field(default_factory=dict, description="Labels added to operand pods.")
    annotations: LabelMap = Field(
        default_factory=dict, description="Annotations added to operand pods."
    )
    tolerations: list[Toleration] = Field(
        default_factory=_default_tolerations,
        max_length=MAX_LIST_ITEMS,
        description="Tolerations of operand pods.",
    )
    priority_class_name: ObjectName = Field(
        default="system-node-critical", description="Priority class of operand pods."
    )
    update_strategy: Literal["RollingUpdate", "OnDelete"] = Field(
        default="RollingUpdate", description="Update strategy of operand DaemonSets."
    )
    rolling_update: RollingUpdate = Field(
        default_factory=RollingUpdate, description="Settings of the RollingUpdate strategy."
    )
    node_selector: LabelMap = Field(
        default_factory=dict,
        description="Node labels an operand pod requires, besides the nvidia.com/gpu.deploy.* "
        "label of its operand.",
    )
    affinity: dict[str, Any] | None = Field(
        default=None, description="Pod affinity of operand pods (a Kubernetes Affinity)."
    )


class OperatorSpec(ApiModel):
    """Operator-wide settings."""

    runtime_class: DnsLabel = Field(
        default="nvidia", description="Name of the RuntimeClass gpuctrl creates for GPU pods."
    )
    default_runtime: ContainerRuntime = Field(
        default="containerd",
        description="The nodes' container runtime, which the toolkit agent configures: "
        "containerd (its distribution detected per node) or crio (through its drop-in folder, "
        "/etc/crio/crio.conf.d).",
    )
    labels: LabelMap = Field(
        default_factory=dict, description="Labels added to every object gpuctrl creates."
    )
    annotations: LabelMap = Field(
        default_factory=dict, description="Annotations added to every object gpuctrl creates."
    )
