"""The driver controller (``DriverReady``): the NVIDIA driver, one DaemonSet per GPU nodes' OS.

One `controllers._operand.Operand` (set up from `controllers.operands`); the reconcile is the
one all operands share. While the
repository configuration has errors (`controllers.repoconfig`) it keeps its last good
DaemonSets: ``DriverReady=False, reason=InvalidRepoConfig``. Its DaemonSets are OnDelete:
each node's pod is replaced by the upgrade controller (`controllers.upgrade`), and
``DriverReady`` is True only once every node runs the newest revision and its upgrade is done
(validated on it).
"""

from __future__ import annotations

from api.v1alpha1 import ClusterPolicy
from controllers._operand import Operand
from controllers._upgrade_plan import upgraded
from controllers.render import ClusterFacts, nodes_without_driver
from controllers.repoconfig import repo_errors

__all__ = ["DRIVER"]


def nodes_upgrading(policy: ClusterPolicy, facts: ClusterFacts) -> list[str]:
    """GPU nodes, by name, whose upgrade state says their current driver is not yet
    validated (none while autoUpgrade is off: then nothing moves the states)."""
    if not policy.spec.driver.upgrade_policy.auto_upgrade:
        return []
    return [node.name for node in facts.gpu_nodes() if not upgraded(node.labels)]


DRIVER = Operand(
    "driver",
    "DriverReady",
    enabled=lambda policy: policy.spec.driver.enabled,
    unplaced=nodes_without_driver,
    blocked=repo_errors,
    unsettled=nodes_upgrading,
)
