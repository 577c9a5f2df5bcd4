"""Every controller of the operator on one `gpuctrl.runtime.Manager` (see each module).

`setup_controllers` adds them to a manager whose cache was built with `TRANSFORMS` (Nodes and
Pods trimmed to what is read); they share its informers, one per resource and selector, and
one Event recorder.
"""

from __future__ import annotations

from controllers import nodes, podpolicy, policy, repoconfig, upgrade
from controllers._operand import setup_operand
from controllers._reads import TRANSFORMS
from controllers._status import PolicyStatus
from controllers.operands import OPERANDS
from gpuctrl.runtime import Manager, StatusWriter

__all__ = ["TRANSFORMS", "setup_controllers"]


def setup_controllers(manager: Manager, namespace: str) -> None:
    """Add the operator's controllers, whose operands live in ``namespace``, to ``manager``.

    Each records its Events as ``gpuctrl-<name>`` (an operand's component name), so each has
    its own spam-filter budget and ``kubectl describe`` tells who said what.
    """
    writer = StatusWriter(manager.client, attempts=10, clock=manager.clock)

    def status(name: str) -> PolicyStatus:
        return PolicyStatus(writer, manager.event_recorder(f"gpuctrl-{name}"))

    nodes.setup(manager, namespace, status("nodes"))
    for operand in OPERANDS:
        setup_operand(manager, namespace, operand, status(operand.component))
    repoconfig.setup(manager, namespace, status("repo-config"))
    upgrade.setup(manager, namespace, status("driver-upgrade"))
    policy.setup(manager, namespace, status("policy"))
    podpolicy.setup(manager, namespace)
