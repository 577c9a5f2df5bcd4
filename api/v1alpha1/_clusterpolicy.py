"""ClusterPolicy: the cluster-wide description of the GPU stack gpuctrl deploys."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Literal

from pydantic import Field

from api.v1alpha1._base import ApiModel, ApiObject
from api.v1alpha1._cdi import CDISpec
from api.v1alpha1._daemonsets import DaemonsetsSpec, OperatorSpec
from api.v1alpha1._dcgm import DCGMExporterSpec, DCGMSpec
from api.v1alpha1._deviceplugin import DevicePluginSpec
from api.v1alpha1._driver import DriverSpec
from api.v1alpha1._gfd import GFDSpec
from api.v1alpha1._mig import MIGSpec
from api.v1alpha1._migmanager import MIGManagerSpec
from api.v1alpha1._nodestatus import NodeStatusExporterSpec
from api.v1alpha1._status import ClusterPolicyStatus
from api.v1alpha1._toolkit import ToolkitSpec
from api.v1alpha1._validator import ValidatorSpec

__all__ = ["ClusterPolicy", "ClusterPolicySpec", "honoured_policy"]


class ClusterPolicySpec(ApiModel):
    """The desired GPU stack. An empty spec is valid: every field has a default."""

    operator: OperatorSpec = Field(default_factory=OperatorSpec, description="Operator-wide.")
    daemonsets: DaemonsetsSpec = Field(
        default_factory=DaemonsetsSpec, description="Applied to every operand DaemonSet."
    )
    driver: DriverSpec = Field(default_factory=DriverSpec, description="The NVIDIA driver.")
    toolkit: ToolkitSpec = Field(
        default_factory=ToolkitSpec, description="The container toolkit agent."
    )
    validator: ValidatorSpec = Field(
        default_factory=ValidatorSpec, description="The validator agent."
    )
    device_plugin: DevicePluginSpec = Field(
        default_factory=DevicePluginSpec, description="NVIDIA's device plugin."
    )
    gfd: GFDSpec = Field(default_factory=GFDSpec, description="NVIDIA's GPU feature discovery.")
    dcgm: DCGMSpec = Field(default_factory=DCGMSpec, description="NVIDIA's DCGM host engine.")
    dcgm_exporter: DCGMExporterSpec = Field(
        default_factory=DCGMExporterSpec, description="NVIDIA's DCGM exporter."
    )
    node_status_exporter: NodeStatusExporterSpec = Field(
        default_factory=NodeStatusExporterSpec,
        description="The validator's status files as Prometheus metrics.",
    )
    mig_manager: MIGManagerSpec = Field(
        default_factory=MIGManagerSpec,
        description="NVIDIA's MIG manager: partitions GPUs as nvidia.com/mig.config asks.",
    )
    mig: MIGSpec = Field(default_factory=MIGSpec, description="How MIG devices are advertised.")
    cdi: CDISpec = Field(
        default_factory=CDISpec, description="How GPUs reach containers: CDI or the legacy path."
    )


class ClusterPolicy(ApiObject):
    """A ``gpuctrl.io/v1alpha1`` ClusterPolicy object (cluster-scoped)."""

    kind: Literal["ClusterPolicy"] = "ClusterPolicy"
    spec: ClusterPolicySpec = Field(default_factory=ClusterPolicySpec)
    status: ClusterPolicyStatus | None = None


def honoured_policy(policies: Iterable[ClusterPolicy]) -> ClusterPolicy | None:
    """The one ClusterPolicy gpuctrl acts on (the others get state ``ignored``); None if none.

    The oldest by ``metadata.creationTimestamp`` (RFC 3339 text or a datetime), ties broken by
    name; a policy without a timestamp (not yet stored) counts as newer than any stored one.
    """
    return min(policies, key=_age_key, default=None)


def _age_key(policy: ClusterPolicy) -> tuple[bool, datetime, str]:
    created = policy.metadata.get("creationTimestamp")
    if isinstance(created, str):
        created = datetime.fromisoformat(created)
    name = str(policy.metadata.get("name", ""))
    if not isinstance(created, datetime):
        return (True, datetime.min, name)
    return (False, created, name)
