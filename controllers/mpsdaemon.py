"""The MPS control daemon controller: NVIDIA's MPS control daemon beside the device plugin, on
the nodes whose config shares GPUs by MPS (``MPSControlDaemonReady``).

One `controllers._operand.Operand` (set up from `controllers.operands`); the reconcile is the
one all operands share. Deployed whenever the device plugin is, as by NVIDIA's operator: its
DaemonSet selects the device plugin's deploy label and ``nvidia.com/mps.capable=true``, so it
runs nowhere until GPU feature discovery labels a node MPS-capable.
"""

from __future__ import annotations

from controllers._operand import Operand

__all__ = ["MPS_CONTROL_DAEMON"]

MPS_CONTROL_DAEMON = Operand(
    "mps-control-daemon",
    "MPSControlDaemonReady",
    enabled=lambda policy: policy.spec.device_plugin.enabled,
)
