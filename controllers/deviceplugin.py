"""The device-plugin controller: NVIDIA's device plugin (``DevicePluginReady``).

One `controllers._operand.Operand` (set up from `controllers.operands`); the reconcile is the
one all operands share.
"""

from __future__ import annotations

from controllers._operand import Operand

__all__ = ["DEVICE_PLUGIN"]

DEVICE_PLUGIN = Operand(
    "device-plugin",
    "DevicePluginReady",
    enabled=lambda policy: policy.spec.device_plugin.enabled,
)
