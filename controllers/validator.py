"""The validator controller: the validator agent and its workloads ConfigMap (``ValidatorReady``).

One `controllers._operand.Operand`; the reconcile is the one all operands share.
"""

from __future__ import annotations

from controllers._operand import Operand, setup_operand
from controllers._status import PolicyStatus
from gpuctrl.runtime import Controller, Manager

__all__ = ["VALIDATOR", "setup"]

VALIDATOR = Operand(
    "validator",
    "ValidatorReady",
    enabled=lambda policy: policy.spec.validator.enabled,
)


def setup(manager: Manager, namespace: str, status: PolicyStatus) -> Controller:
    """Add the validator controller to ``manager``."""
    return setup_operand(manager, namespace, VALIDATOR, status)
