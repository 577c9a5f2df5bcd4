"""The DCGM exporter controller: NVIDIA's ``dcgm-exporter`` and its metrics Service
(``DCGMExporterReady``).

One `controllers._operand.Operand` (set up from `controllers.operands`); the reconcile is the
one all operands share.
"""

from __future__ import annotations

from controllers._operand import Operand

__all__ = ["DCGM_EXPORTER"]

DCGM_EXPORTER = Operand(
    "dcgm-exporter",
    "DCGMExporterReady",
    enabled=lambda policy: policy.spec.dcgm_exporter.enabled,
)
