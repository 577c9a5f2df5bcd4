"""The MIG manager controller: NVIDIA's MIG manager on MIG-capable GPU nodes, with its
mig-parted config and GPU clients file (``MIGManagerReady``).

One `controllers._operand.Operand` (set up from `controllers.operands`); the reconcile is the
one all operands share. The node labeller gives the deploy label to MIG-capable nodes only
(`controllers.nodes.is_mig_capable`) and keeps the ``paused-for-mig-change`` values the MIG
manager writes on its GPU clients' deploy labels while it reconfigures a node.
"""

from __future__ import annotations

from controllers._operand import Operand

__all__ = ["MIG_MANAGER"]

MIG_MANAGER = Operand(
    "mig-manager",
    "MIGManagerReady",
    enabled=lambda policy: policy.spec.mig_manager.enabled,
)
