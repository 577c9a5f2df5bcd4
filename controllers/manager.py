"""Every controller of the operator on one `gpuctrl.runtime.Manager` (see each module).

`setup_controllers` adds them to a manager whose cache was built with `TRANSFORMS` (Nodes and
Pods trimmed to what is read); they share its informers, one per resource and selector, and
one Event recorder.
"""

from __future__ import annotations

from controllers import deviceplugin, driver, nodes, podpolicy, policy, toolkit, validator
from controllers._cluster import TRANSFORMS
from controllers._status import PolicyStatus
from gpuctrl.runtime import Manager, StatusWriter

__all__ = ["COMPONENT", "TRANSFORMS", "setup_controllers"]

COMPONENT = "gpuctrl-manager"
"""The Events' source component."""


def setup_controllers(manager: Manager, namespace: str) -> None:
    """Add the operator's controllers, whose operands live in ``namespace``, to ``manager``."""
    writer = StatusWriter(manager.client, attempts=10, clock=manager.clock)
    status = PolicyStatus(writer, manager.event_recorder(COMPONENT))
    nodes.setup(manager, namespace, status)
    for operand in (driver, toolkit, validator, deviceplugin):
        operand.setup(manager, namespace, status)
    policy.setup(manager, namespace, status)
    podpolicy.setup(manager, namespace)
