"""The dcgm and dcgmExporter sections: NVIDIA's DCGM host engine and its Prometheus exporter."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from api.v1alpha1._base import ApiModel, ObjectName
from api.v1alpha1._component import Component, ImageVersion
from api.v1alpha1._images import NVIDIA_IMAGES

__all__ = [
    "DCGMExporterMetricsConfig",
    "DCGMExporterServiceConfig",
    "DCGMExporterSpec",
    "DCGMSpec",
]

_ENGINE = NVIDIA_IMAGES["dcgm"]
_EXPORTER = NVIDIA_IMAGES["dcgmExporter"]


class DCGMSpec(Component):
    """NVIDIA's DCGM host engine (``nv-hostengine``) in a pod of its own on each GPU node, off
    by default as in NVIDIA's chart (the exporter then runs its own embedded engine). Enabled,
    the exporter on each node reaches the engine on that node through the ``gpuctrl-dcgm``
    Service (``internalTrafficPolicy: Local``, port 5555)."""

    enabled: bool = Field(
        default=False, description="Whether gpuctrl deploys the standalone DCGM host engine."
    )
    repository: str = Field(default=_ENGINE.repository, description="Image registry/path.")
    image: str = Field(default=_ENGINE.image, description="Image name.")
    version: ImageVersion = Field(
        default=_ENGINE.version, description="Image tag or sha256: digest."
    )
    host_network: bool = Field(
        default=False, description="Run its pods in the node's network namespace."
    )


class DCGMExporterMetricsConfig(ApiModel):
    """The exporter's custom metrics: a ConfigMap of the operator namespace whose
    ``dcgm-metrics.csv`` key lists the DCGM fields to export (NVIDIA's ``config``)."""

    name: ObjectName | None = Field(
        default=None,
        description="ConfigMap holding dcgm-metrics.csv; unset: the image's default metrics.",
    )


class DCGMExporterServiceConfig(ApiModel):
    """The exporter's metrics Service (NVIDIA's ``service``)."""

    type: Literal["ClusterIP", "NodePort", "LoadBalancer"] = Field(
        default="ClusterIP", description="The Service type."
    )
    internal_traffic_policy: Literal["Local", "Cluster"] = Field(
        default="Local",
        description="Local: traffic to the ClusterIP from a node reaches that node's exporter.",
    )


class DCGMExporterSpec(Component):
    """NVIDIA's DCGM exporter: each GPU node's DCGM metrics for Prometheus on port 9400,
    behind the ``gpuctrl-dcgm-exporter`` Service, on the nodes labelled
    ``nvidia.com/gpu.deploy.dcgm-exporter=true``."""

    repository: str = Field(default=_EXPORTER.repository, description="Image registry/path.")
    image: str = Field(default=_EXPORTER.image, description="Image name.")
    version: ImageVersion = Field(
        default=_EXPORTER.version, description="Image tag or sha256: digest."
    )
    config: DCGMExporterMetricsConfig = Field(
        default_factory=DCGMExporterMetricsConfig,
        description="Custom metrics: a ConfigMap with dcgm-metrics.csv.",
    )
    service: DCGMExporterServiceConfig = Field(
        default_factory=DCGMExporterServiceConfig, description="The metrics Service."
    )
    host_network: bool = Field(
        default=False, description="Run its pods in the node's network namespace."
    )
    host_pid: bool = Field(
        default=False,
        alias="hostPID",
        description="Run its pods in the node's PID namespace (NVIDIA's hostPID).",
    )
