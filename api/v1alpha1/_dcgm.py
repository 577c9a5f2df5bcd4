"""The dcgm and dcgmExporter sections: NVIDIA's DCGM host engine and its Prometheus exporter."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from api.v1alpha1._base import MAX_LIST_ITEMS, ApiModel, LabelMap, ObjectName
from api.v1alpha1._cel import Rule, cel_rules, interpolated, quoted
from api.v1alpha1._component import Component, ImageVersion
from api.v1alpha1._images import NVIDIA_IMAGES

__all__ = [
    "SERVICE_MONITOR_CRD",
    "DCGMExporterMetricsConfig",
    "DCGMExporterServiceConfig",
    "DCGMExporterServiceMonitorConfig",
    "DCGMExporterSpec",
    "DCGMSpec",
    "RelabelConfig",
]

_ENGINE = NVIDIA_IMAGES["dcgm"]
_EXPORTER = NVIDIA_IMAGES["dcgmExporter"]
SERVICE_MONITOR_CRD = "servicemonitors.monitoring.coreos.com"
"""The Prometheus Operator's CRD of ServiceMonitors."""
# The Prometheus Operator's Duration: 30s, 1m30s, 500ms, 1h (its CRD's pattern).
_DURATION = (
    r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"
)
Duration = Annotated[
    str,
    Field(
        max_length=64,
        json_schema_extra=cel_rules(
            Rule(
                rule=f"self.matches({quoted(_DURATION)})",
                message_expression=interpolated(
                    "'{self}' is not a Prometheus duration (e.g. 15s, 1m30s, 500ms)"
                ),
            )
        ),
    ),
]


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


class RelabelConfig(ApiModel):
    """A Prometheus relabeling step (the Prometheus Operator's RelabelConfig)."""

    source_labels: list[str] = Field(
        default_factory=list, max_length=MAX_LIST_ITEMS, description="Labels whose values join."
    )
    separator: str | None = Field(default=None, description="Between the joined values (;).")
    target_label: str | None = Field(default=None, description="The label written.")
    regex: str | None = Field(default=None, description="Matched against the joined values.")
    modulus: int | None = Field(default=None, ge=0, description="For hashmod.")
    replacement: str | None = Field(default=None, description="Written on a match ($1).")
    action: (
        Literal[
            "replace",
            "keep",
            "drop",
            "hashmod",
            "labelmap",
            "labeldrop",
            "labelkeep",
            "lowercase",
            "uppercase",
            "keepequal",
            "dropequal",
        ]
        | None
    ) = Field(default=None, description="What the step does (default replace).")


class DCGMExporterServiceMonitorConfig(ApiModel):
    """A Prometheus Operator ServiceMonitor of the metrics Service (NVIDIA's
    ``serviceMonitor``): made when enabled and the Prometheus Operator's CRD
    (`SERVICE_MONITOR_CRD`) is installed; enabled without it, ``DCGMExporterReady`` is False
    (reason ``MissingCRD``) while the exporter runs on."""

    enabled: bool = Field(default=False, description="Make the ServiceMonitor.")
    interval: Duration | None = Field(
        default=None, description="Scrape interval (unset: Prometheus's global one)."
    )
    scrape_timeout: Duration | None = Field(
        default=None, description="Scrape timeout (unset: Prometheus's global one)."
    )
    honor_labels: bool = Field(
        default=False, description="Keep the metrics' labels where they clash with the target's."
    )
    additional_labels: LabelMap = Field(
        default_factory=dict, description="Labels of the ServiceMonitor (a Prometheus's selector)."
    )
    relabelings: list[RelabelConfig] = Field(
        default_factory=list,
        max_length=MAX_LIST_ITEMS,
        description="The endpoint's relabelings (Prometheus Operator RelabelConfigs).",
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
    service_monitor: DCGMExporterServiceMonitorConfig = Field(
        default_factory=DCGMExporterServiceMonitorConfig,
        description="A Prometheus Operator ServiceMonitor of the metrics Service.",
    )
    host_network: bool = Field(
        default=False, description="Run its pods in the node's network namespace."
    )
    host_pid: bool = Field(
        default=False,
        alias="hostPID",
        description="Run its pods in the node's PID namespace (NVIDIA's hostPID).",
    )
