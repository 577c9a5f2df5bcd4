"""The DCGM exporter controller: NVIDIA's ``dcgm-exporter``, its metrics Service and, where
the Prometheus Operator's CRD is installed, its ServiceMonitor (``DCGMExporterReady``).

One `controllers._operand.Operand` (set up from `controllers.operands`); the reconcile is the
one all operands share.
"""

from __future__ import annotations

from controllers._kinds import SERVICE_MONITORS
from controllers._operand import Operand
from controllers.render import missing_crds

__all__ = ["DCGM_EXPORTER"]

DCGM_EXPORTER = Operand(
    "dcgm-exporter",
    "DCGMExporterReady",
    enabled=lambda policy: policy.spec.dcgm_exporter.enabled,
    missing=missing_crds,
    optional=(SERVICE_MONITORS,),
)
