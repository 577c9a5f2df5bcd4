"""The nodeStatusExporter section: the validator's status files as Prometheus metrics."""

from __future__ import annotations

from pydantic import Field

from api.v1alpha1._component import AGENT_REPOSITORY, AGENT_VERSION, Component, ImageVersion

__all__ = ["NodeStatusExporterSpec"]


class NodeStatusExporterSpec(Component):
    """NVIDIA's node status exporter, off by default as in NVIDIA's chart: on each node
    labelled ``nvidia.com/gpu.deploy.node-status-exporter=true``, gpuctrl's agent
    (``gpuctrl validate metrics``) serves NVIDIA's ``gpu_operator_node_*`` gauges on port 8000
    (the status files, the driver check, the node's GPUs and NVIDIA PCI devices)."""

    enabled: bool = Field(
        default=False, description="Whether gpuctrl deploys the node status exporter."
    )
    repository: str = Field(default=AGENT_REPOSITORY, description="Image registry/path.")
    image: str = Field(default="gpuctrl", description="Image name.")
    version: ImageVersion = Field(default=AGENT_VERSION, description="Image tag or sha256: digest.")
