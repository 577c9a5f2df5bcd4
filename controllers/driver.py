"""The driver controller (``DriverReady``): the NVIDIA driver, one DaemonSet per GPU nodes' OS.

One `controllers._operand.Operand` (set up from `controllers.operands`); the reconcile is the
one all operands share. While the
repository configuration has errors (`controllers.repoconfig`) it keeps its last good
DaemonSets: ``DriverReady=False, reason=InvalidRepoConfig``.
"""

from __future__ import annotations

from controllers._operand import Operand
from controllers.render import nodes_without_driver
from controllers.repoconfig import repo_errors

__all__ = ["DRIVER"]

DRIVER = Operand(
    "driver",
    "DriverReady",
    enabled=lambda policy: policy.spec.driver.enabled,
    unplaced=nodes_without_driver,
    blocked=repo_errors,
)
