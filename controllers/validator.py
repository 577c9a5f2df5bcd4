"""The validator controller: the validator agent and its workloads ConfigMap (``ValidatorReady``).

One `controllers._operand.Operand` (set up from `controllers.operands`); the reconcile is the
one all operands share.
"""

from __future__ import annotations

from controllers._operand import Operand

__all__ = ["VALIDATOR"]

VALIDATOR = Operand(
    "validator",
    "ValidatorReady",
    enabled=lambda policy: policy.spec.validator.enabled,
)
