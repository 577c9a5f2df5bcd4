"""gpuctrl.io/v1alpha1: ClusterPolicy, PodPolicy, the types they are made of and their checks.

Every model is frozen, camelCase on the wire (``Model.model_validate(mapping)``; `wire` gives
the mapping back) and accepts Python field names too. `load_cluster_policy` parses and runs
`validate`, raising `InvalidPolicy` with every problem and its field path.
"""

from api.v1alpha1._base import (
    EnvVar,
    LocalObjectReference,
    ResourceRequirements,
    Toleration,
    wire,
)
from api.v1alpha1._cdi import CDISpec
from api.v1alpha1._clusterpolicy import ClusterPolicy, ClusterPolicySpec, honoured_policy
from api.v1alpha1._component import Component, Image, image_reference
from api.v1alpha1._daemonsets import ContainerRuntime, DaemonsetsSpec, OperatorSpec, RollingUpdate
from api.v1alpha1._dcgm import (
    SERVICE_MONITOR_CRD,
    DCGMExporterMetricsConfig,
    DCGMExporterServiceConfig,
    DCGMExporterServiceMonitorConfig,
    DCGMExporterSpec,
    DCGMSpec,
)
from api.v1alpha1._deviceplugin import DevicePluginConfig, DevicePluginSpec, MPSConfig
from api.v1alpha1._driver import CertConfig, DriverManagerSpec, DriverSpec, RepoConfig
from api.v1alpha1._gfd import GFDSpec
from api.v1alpha1._images import NVIDIA_IMAGES, PinnedImage
from api.v1alpha1._mig import MIGSpec, MIGStrategy
from api.v1alpha1._migmanager import MIGGPUClientsConfig, MIGManagerSpec, MIGPartedConfig
from api.v1alpha1._names import CLUSTER_POLICY, POD_POLICY, KindNames
from api.v1alpha1._nodestatus import NodeStatusExporterSpec
from api.v1alpha1._podpolicy import (
    LabelSelector,
    LabelSelectorRequirement,
    Mesh,
    MeshOptOut,
    PodPolicy,
    PodPolicySpec,
    PodPolicyStatus,
    PodTargets,
    TargetComponent,
    mesh_opt_outs,
    refused_key,
)
from api.v1alpha1._quantity import parse_quantity
from api.v1alpha1._selector import (
    COMPONENT_LABEL,
    selector_matches,
    targets_pod,
)
from api.v1alpha1._status import ClusterPolicyStatus, Condition, State
from api.v1alpha1._toolkit import (
    CONTAINERD_DEFAULTS,
    ContainerdDistribution,
    ContainerdSettings,
    DropInMode,
    RestartMode,
    RuntimeImage,
    ToolkitSpec,
    containerd_defaults,
)
from api.v1alpha1._upgrade import (
    DrainSpec,
    DriverUpgradePolicySpec,
    GPUPodDeletionSpec,
    WaitForCompletionSpec,
    parse_selector,
    scaled_max_unavailable,
)
from api.v1alpha1._validation import (
    InvalidPolicy,
    Problem,
    load_cluster_policy,
    load_pod_policy,
    validate,
    validate_pod_policy,
    validate_workloads,
)
from api.v1alpha1._validator import ValidatorCheck, ValidatorSpec, ValidatorWorkloads

__all__ = [
    "CLUSTER_POLICY",
    "COMPONENT_LABEL",
    "CONTAINERD_DEFAULTS",
    "NVIDIA_IMAGES",
    "POD_POLICY",
    "SERVICE_MONITOR_CRD",
    "CDISpec",
    "CertConfig",
    "ClusterPolicy",
    "ClusterPolicySpec",
    "ClusterPolicyStatus",
    "Component",
    "Condition",
    "ContainerRuntime",
    "ContainerdDistribution",
    "ContainerdSettings",
    "DCGMExporterMetricsConfig",
    "DCGMExporterServiceConfig",
    "DCGMExporterServiceMonitorConfig",
    "DCGMExporterSpec",
    "DCGMSpec",
    "DaemonsetsSpec",
    "DevicePluginConfig",
    "DevicePluginSpec",
    "DrainSpec",
    "DriverManagerSpec",
    "DriverSpec",
    "DriverUpgradePolicySpec",
    "DropInMode",
    "EnvVar",
    "GFDSpec",
    "GPUPodDeletionSpec",
    "Image",
    "InvalidPolicy",
    "KindNames",
    "LabelSelector",
    "LabelSelectorRequirement",
    "LocalObjectReference",
    "MIGGPUClientsConfig",
    "MIGManagerSpec",
    "MIGPartedConfig",
    "MIGSpec",
    "MIGStrategy",
    "MPSConfig",
    "Mesh",
    "MeshOptOut",
    "NodeStatusExporterSpec",
    "OperatorSpec",
    "PinnedImage",
    "PodPolicy",
    "PodPolicySpec",
    "PodPolicyStatus",
    "PodTargets",
    "Problem",
    "RepoConfig",
    "ResourceRequirements",
    "RestartMode",
    "RollingUpdate",
    "RuntimeImage",
    "State",
    "TargetComponent",
    "Toleration",
    "ToolkitSpec",
    "ValidatorCheck",
    "ValidatorSpec",
    "ValidatorWorkloads",
    "WaitForCompletionSpec",
    "containerd_defaults",
    "honoured_policy",
    "image_reference",
    "load_cluster_policy",
    "load_pod_policy",
    "mesh_opt_outs",
    "parse_quantity",
    "parse_selector",
    "refused_key",
    "scaled_max_unavailable",
    "selector_matches",
    "targets_pod",
    "validate",
    "validate_pod_policy",
    "validate_workloads",
    "wire",
]
