"""The validator section of a ClusterPolicy: its image, per-check env and workload overrides."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from api.v1alpha1._base import (
    MAX_LIST_ITEMS,
    ApiModel,
    EnvVar,
    LabelMap,
    ObjectName,
    PullPolicy,
    ResourceRequirements,
    Toleration,
)
from api.v1alpha1._component import AGENT_REPOSITORY, AGENT_VERSION, Component, ImageVersion
from api.v1alpha1._images import NVIDIA_IMAGES

__all__ = ["ValidatorCheck", "ValidatorSpec", "ValidatorWorkloads"]

# NVIDIA's CUDA sample image: vectorAdd at /cuda-samples/vectorAdd, as the templates expect.
WORKLOAD_IMAGE = NVIDIA_IMAGES["cudaSample"].reference


class ValidatorWorkloads(ApiModel):
    """Where the CUDA and device-plugin workload Pod templates come from, and what to override.

    The overrides apply to every workload pod without editing a template: ``labels`` and
    ``annotations`` are merged into the pod's metadata, each requests/limits entry of
    ``resources`` is set on every container AND init container (entries it does not name keep
    the template's value), the other fields replace the pod's own.
    """

    image: str = Field(
        default=WORKLOAD_IMAGE,
        description="Image of the workload pods; it must hold /cuda-samples/vectorAdd.",
    )
    image_pull_policy: PullPolicy = Field(
        default="IfNotPresent", description="Pull policy of the workload pods' image."
    )
    config_map_name: ObjectName | None = Field(
        default=None,
        description="ConfigMap in the operator namespace whose keys cuda.yaml and plugin.yaml "
        "hold the workload Pod templates; unset = the built-in templates.",
    )
    labels: LabelMap = Field(default_factory=dict, description="Labels added to workload pods.")
    annotations: LabelMap = Field(
        default_factory=dict, description="Annotations added to workload pods."
    )
    resources: ResourceRequirements | None = Field(
        default=None,
        description="Requests and limits set on every container and init container, merged "
        "per resource name (resources not named here keep the template's value).",
    )
    security_context: dict[str, Any] | None = Field(
        default=None,
        description="Pod security context (runAsUser, runAsNonRoot, seccompProfile, ...).",
    )
    tolerations: list[Toleration] = Field(
        default_factory=list,
        max_length=MAX_LIST_ITEMS,
        description="Tolerations added to workload pods.",
    )
    priority_class_name: ObjectName | None = Field(
        default=None, description="Priority class of workload pods."
    )
    runtime_class_name: ObjectName | None = Field(
        default=None, description="Runtime class of workload pods (default: the operator's)."
    )
    timeout_seconds: int = Field(
        default=300,
        ge=1,
        le=86400,
        description="How long a workload pod may take to succeed before the check fails.",
    )


class ValidatorCheck(ApiModel):
    """Settings of one validator check (driver, toolkit, cuda, plugin)."""

    env: list[EnvVar] = Field(
        default_factory=list, max_length=MAX_LIST_ITEMS, description="Environment of the check."
    )


class ValidatorSpec(Component):
    """The validator agent: checks the driver, toolkit, CUDA and device plugin on each node."""

    repository: str = Field(default=AGENT_REPOSITORY, description="Image registry/path.")
    image: str = Field(default="gpuctrl", description="Image name.")
    version: ImageVersion = Field(default=AGENT_VERSION, description="Image tag or sha256: digest.")
    driver: ValidatorCheck = Field(default_factory=ValidatorCheck, description="Driver check.")
    toolkit: ValidatorCheck = Field(default_factory=ValidatorCheck, description="Toolkit check.")
    cuda: ValidatorCheck = Field(default_factory=ValidatorCheck, description="CUDA check.")
    plugin: ValidatorCheck = Field(
        default_factory=ValidatorCheck, description="Device-plugin check."
    )
    workloads: ValidatorWorkloads = Field(
        default_factory=ValidatorWorkloads,
        description="Pod templates of the CUDA and plugin checks and overrides for their pods.",
    )
