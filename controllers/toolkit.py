"""The toolkit controller (``ToolkitReady``): the toolkit agent, its DaemonSet, the RuntimeClass.

One `controllers._operand.Operand` (set up from `controllers.operands`); the reconcile is the
one all operands share.
"""

from __future__ import annotations

from controllers._operand import Operand

__all__ = ["TOOLKIT"]

TOOLKIT = Operand(
    "toolkit",
    "ToolkitReady",
    enabled=lambda policy: policy.spec.toolkit.enabled,
)
