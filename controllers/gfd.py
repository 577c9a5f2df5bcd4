"""The GPU feature discovery controller: NVIDIA's ``gpu-feature-discovery`` (``GFDReady``).

One `controllers._operand.Operand` (set up from `controllers.operands`); the reconcile is the
one all operands share.
"""

from __future__ import annotations

from controllers._operand import Operand

__all__ = ["GFD"]

GFD = Operand(
    "gpu-feature-discovery",
    "GFDReady",
    enabled=lambda policy: policy.spec.gfd.enabled,
)
