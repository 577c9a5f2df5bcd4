"""The driver controller (``DriverReady``): the NVIDIA driver, one DaemonSet per GPU nodes' OS.

One `controllers._operand.Operand`; the reconcile is the one all operands share. While the
repository configuration has errors (`controllers.repoconfig`) it keeps its last good
DaemonSets: ``DriverReady=False, reason=InvalidRepoConfig``.
"""

from __future__ import annotations

from controllers._operand import Operand, setup_operand
from controllers._status import PolicyStatus
from controllers.render import nodes_without_driver
from controllers.repoconfig import repo_errors
from gpuctrl.runtime import Controller, Manager

__all__ = ["DRIVER", "setup"]

DRIVER = Operand(
    "driver",
    "DriverReady",
    enabled=lambda policy: policy.spec.driver.enabled,
    unplaced=nodes_without_driver,
    blocked=repo_errors,
)


def setup(manager: Manager, namespace: str, status: PolicyStatus) -> Controller:
    """Add the driver controller to ``manager``."""
    return setup_operand(manager, namespace, DRIVER, status)
