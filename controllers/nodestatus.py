"""The node status exporter controller: the validator's status files and the node's GPU
checks as NVIDIA's Prometheus gauges (``NodeStatusExporterReady``), off by default.

One `controllers._operand.Operand` (set up from `controllers.operands`); the reconcile is the
one all operands share.
"""

from __future__ import annotations

from controllers._operand import Operand

__all__ = ["NODE_STATUS_EXPORTER"]

NODE_STATUS_EXPORTER = Operand(
    "node-status-exporter",
    "NodeStatusExporterReady",
    enabled=lambda policy: policy.spec.node_status_exporter.enabled,
)
