"""The toolkit controller (``ToolkitReady``): the toolkit agent, its DaemonSet, the RuntimeClass.

One `controllers._operand.Operand`; the reconcile is the one all operands share.
"""

from __future__ import annotations

from controllers._operand import Operand, setup_operand
from controllers._status import PolicyStatus
from gpuctrl.runtime import Controller, Manager

__all__ = ["TOOLKIT", "setup"]

TOOLKIT = Operand(
    "toolkit",
    "ToolkitReady",
    enabled=lambda policy: policy.spec.toolkit.enabled,
)


def setup(manager: Manager, namespace: str, status: PolicyStatus) -> Controller:
    """Add the toolkit controller to ``manager``."""
    return setup_operand(manager, namespace, TOOLKIT, status)
