"""The DCGM controller: NVIDIA's standalone DCGM host engine (``DCGMReady``), off by default.

One `controllers._operand.Operand` (set up from `controllers.operands`); the reconcile is the
one all operands share.
"""

from __future__ import annotations

from controllers._operand import Operand

__all__ = ["DCGM"]

DCGM = Operand("dcgm", "DCGMReady", enabled=lambda policy: policy.spec.dcgm.enabled)
